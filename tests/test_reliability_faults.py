"""Faults of issue 18, as a user meets them: a kill after an epoch that did not improve the
metric, SIGTERM from a scheduler, a crafted checkpoint. Real runs as subprocesses; the runs
nothing stops (a resume to the end, a reference run) in this process (helpers.here)."""

import json
import os

import pandas as pd
import pytest
import torch
from helpers.here import run_here
from helpers.reliability import (
    assert_same_as_reference,
    load,
    printed,
    run,
    train,
    train_here,
)
from helpers.runs import ROOT, run_cli, run_dirs, run_in_process

# no step saves: only the per-epoch last.ckpt; min mode on accuracy: after epoch 0 the
# "best" never improves again while the model learns
NO_IMPROVEMENT = ["callbacks.last_checkpoint.every_n_train_steps=0", "model.monitor_mode=min"]


@pytest.mark.slow  # make test's 5 minutes: the slow stage runs it
def test_kill_after_an_epoch_without_improvement_resumes_from_that_epoch(tmp_path, capfd):
    """The resume, which nothing stops, runs in this process (helpers.here)."""
    logs = tmp_path / "logs"
    p = train(logs, *NO_IMPROVEMENT, fault=(12, "sigkill"))  # first batch of epoch 2
    assert p.returncode == -9, p.stderr[-3000:]
    run = run_dirs(logs)[0]
    files = sorted(f.name for f in (run / "checkpoints").iterdir())
    assert files == ["epoch_000.ckpt", "last.ckpt"], files  # epoch 1 did not improve...
    last = load(run / "checkpoints" / "last.ckpt")
    assert (last["epoch"], last["global_step"]) == (1, 12)  # ...and last.ckpt still has it
    p = train_here(logs, *NO_IMPROVEMENT, "ckpt_path=last", capfd=capfd)
    assert p.returncode == 0, p.stderr[-3000:]
    trained = pd.read_csv(run / "csv" / "metrics.csv").dropna(subset=["train/loss"])
    assert sorted(trained["epoch"]) == [0, 1, 2], "no epoch was trained twice"


def test_sigterm_saves_last_ckpt_closes_logs_and_exits_143(tmp_path):
    """SIGTERM at step 5: the batch finishes, last.ckpt holds step 6, the CSV log is on disk."""
    logs = tmp_path / "logs"
    p = train(logs, fault=(5, "sigterm"))
    assert p.returncode == 143, p.stderr[-3000:]
    run = run_dirs(logs)[0]
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 6
    assert "SIGTERM at global step 6" in p.stdout + p.stderr
    assert (run / "csv" / "metrics.csv").is_file()
    assert not (run / "metrics.json").exists(), "no test results after a SIGTERM"


@pytest.mark.slow
def test_resume_after_sigterm_and_ctrl_c_on_last_batch(tmp_path, ref_run, capfd):
    """SIGTERM mid-epoch; Ctrl-C, then SIGTERM, on an epoch's last batch (the epoch's validation
    and end still run before the stop); each resumed: the same weights, metrics and log as the
    run that was never stopped (the last resume, which nothing stops, in this process)."""
    logs = tmp_path / "logs"
    last = lambda: load(run_dirs(logs)[0] / "checkpoints" / "last.ckpt")  # noqa: E731
    p = train(logs, fault=(2, "sigterm"))
    assert p.returncode == 143 and last()["global_step"] == 3, p.stderr[-3000:]
    p = train(logs, "ckpt_path=last", fault=(5, "sigint"))
    assert p.returncode == 1 and last()["global_step"] == 6, p.stderr[-3000:]
    assert last()["epoch"] == 0 and "epoch_000.ckpt" in os.listdir(
        run_dirs(logs)[0] / "checkpoints"
    )
    p = train(logs, "ckpt_path=last", fault=(11, "sigterm"))
    assert p.returncode == 143 and last()["global_step"] == 12, p.stderr[-3000:]
    p = train_here(logs, "ckpt_path=last", capfd=capfd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert_same_as_reference(run_dirs(logs)[0], ref_run)


# the fault comes from the environment (FAULT=kind@stage:step:batch, tests/faults.py), so the
# resume command a stopped run prints, which repeats its overrides, is run as printed
ENV_FAULT = ["+callbacks.fault._target_=faults.EnvFault"]
# EarlyStopping watching val/acc (patience 100: it never stops these runs, as in ref_run)
EARLY_STOPPING = (
    "callbacks.early_stopping={_target_:lightning.pytorch.callbacks.EarlyStopping,"
    "monitor:val/acc,mode:max,patience:100}"
)


def resume_command(proc) -> str:
    """The resume the run printed: its `resume: ` line, or the end of its `error: ` line."""
    lines = [ln for ln in proc.stderr.splitlines() if "resume: python " in ln]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0].split("resume: ", 1)[1]


@pytest.mark.slow  # five runs
def test_stops_during_validation_and_test_resume_as_printed(tmp_path, ref_run, capfd):
    """SIGTERM in the first and in the last batch of an epoch's validation, in the last epoch's
    validation, then in the test: each exits 143 with last.ckpt of the epoch's end, keeps the
    run dir marked failed, and prints a resume that works as printed (EarlyStopping and the
    best checkpoint find their val metric); the end equals the run never stopped. The last
    resume, which nothing stops, runs in this process (helpers.here)."""
    logs = tmp_path / "logs"
    p = train(logs, *ENV_FAULT, EARLY_STOPPING, env={"FAULT": "sigterm@validate:6:0"})
    assert p.returncode == 143, p.stderr[-3000:]
    [run_dir] = run_dirs(logs)
    command = resume_command(p)
    for spec, saved in [  # the next stop, and last.ckpt (epoch, step) before it
        ("sigterm@validate:12:1", (0, 6)),  # the validation's last batch
        ("sigterm@validate:18:0", (1, 12)),  # the last epoch's validation: no test after it
        ("sigterm@test:18:0", (2, 18)),
        ("", (2, 18)),  # not stopped: trains nothing more and tests
    ]:
        last = load(run_dir / "checkpoints" / "last.ckpt")
        assert (last["epoch"], last["global_step"]) == saved, spec
        failed = json.loads((run_dir / "failed.json").read_text())
        assert failed["resume"] == command and failed["exit_code"] == 143
        p = (
            run(printed(command), env={"FAULT": spec})
            if spec
            else run_here(printed(command), capfd)
        )
        assert p.returncode == (143 if spec else 0), p.stderr[-3000:]
        assert not spec or resume_command(p) == command
    assert run_dirs(logs) == [run_dir] and not (run_dir / "failed.json").exists()
    assert_same_as_reference(run_dir, ref_run)
    # the last resume trained nothing: its val/train metrics are the checkpoint's, as unbroken
    saved = lambda run: json.loads((run / "metrics.json").read_text())  # noqa: E731
    assert saved(run_dir) == saved(ref_run)


@pytest.mark.slow  # three runs
def test_a_stop_during_a_mid_epoch_validation_resumes_bit_identical(tmp_path, capfd):
    """Validation every 3 batches: SIGTERM in the one after batch 3 lets it finish, the run
    stops at the end of batch 4 (a mid-epoch last.ckpt), and the resume equals the unbroken run.
    The unbroken run and the resume run in this process (helpers.here)."""
    mid = "+trainer.val_check_interval=3"
    ref = train_here(tmp_path / "ref", mid, capfd=capfd)
    assert ref.returncode == 0, ref.stderr[-3000:]
    logs = tmp_path / "logs"
    p = train(logs, mid, *ENV_FAULT, EARLY_STOPPING, env={"FAULT": "sigterm@validate:3:0"})
    assert p.returncode == 143, p.stderr[-3000:]
    [run_dir] = run_dirs(logs)
    last = load(run_dir / "checkpoints" / "last.ckpt")
    assert (last["epoch"], last["global_step"]) == (0, 4)
    p = run_here(printed(resume_command(p)), capfd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert_same_as_reference(run_dir, run_dirs(tmp_path / "ref")[0])


@pytest.mark.slow  # four runs
def test_errors_after_a_checkpoint_keep_the_run_and_its_resume_works_as_printed(
    tmp_path, ref_run, capfd
):
    """A NaN loss, a full disk, then a crash litlab does not know, each after checkpoints were
    written: the run dir stays with them (marked failed), the message is one line ending with
    the resume command, which, run as printed, ends like the run that never failed (that last
    resume in this process: helpers.here)."""
    logs = tmp_path / "logs"
    last = lambda: load(run_dirs(logs)[0] / "checkpoints" / "last.ckpt")  # noqa: E731
    p = train(logs, *ENV_FAULT, env={"FAULT": "nan_input@train:9"})
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 1 and len(errors) == 1, p.stderr[-3000:]
    assert "training loss is nan at global step 9" in errors[0] and last()["global_step"] == 8
    [run_dir] = run_dirs(logs)
    command = resume_command(p)
    assert command.endswith(f"ckpt_path={run_dir}") and f"paths.log_dir={logs}" in command
    assert json.loads((run_dir / "failed.json").read_text())["resume"] == command

    p = run(printed(command), env={"FAULT": "disk_full@train:10"})  # the step-12 save fails
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and len(lines) == 1, p.stderr[-3000:]
    assert lines[0].startswith("error: the disk is full (No space left on device) writing ")
    assert resume_command(p) == command and last()["global_step"] == 8
    assert "epoch_000.ckpt" in os.listdir(run_dir / "checkpoints")

    p = run(printed(command), env={"FAULT": "raise@train:14"})  # a traceback, exit 1
    assert p.returncode == 1 and "RuntimeError" in p.stderr, p.stderr[-3000:]
    assert resume_command(p) == command and last()["global_step"] == 12
    failed = json.loads((run_dir / "failed.json").read_text())
    assert failed["error"].startswith("RuntimeError: something litlab does not know")

    p = run_here(printed(command), capfd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert run_dirs(logs) == [run_dir] and not (run_dir / "failed.json").exists()
    assert_same_as_reference(run_dir, ref_run)


@pytest.mark.slow  # two runs of an image folder with 2 loader workers
def test_images_deleted_mid_run_keep_the_run_and_the_error_is_one_line(tmp_path):
    """An imagefolder run whose images vanish after epoch 0 (num_workers=2): one line naming
    the image, exit 2; the run dir keeps last.ckpt and the epoch checkpoint; with the images
    back, the printed resume finishes the run."""
    import shutil

    from helpers.datafiles import write_images

    images, backup, logs = tmp_path / "images", tmp_path / "backup", tmp_path / "logs"
    write_images(images, [""])
    shutil.copytree(images, backup)
    data = [
        "data=imagefolder",
        f"data.root={images}",
        "data.image_size=16",
        "data.batch_size=4",
        "data.num_workers=2",
        "trainer.max_epochs=2",
        "callbacks.last_checkpoint.every_n_train_steps=0",
        f"+callbacks.fault.path={images}",
    ]
    p = train(logs, *ENV_FAULT, *data, env={"FAULT": "delete@train:5"})  # epoch 1's start
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-3000:]
    assert lines[0].startswith(f"error: cannot read image {images}/"), lines
    [run_dir] = run_dirs(logs)
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["epoch_000.ckpt", "last.ckpt"]
    assert (run_dir / "failed.json").is_file()
    shutil.rmtree(images)
    shutil.copytree(backup, images)
    p = run(printed(resume_command(p)))
    assert p.returncode == 0, p.stderr[-3000:]
    assert run_dirs(logs) == [run_dir] and (run_dir / "metrics.json").is_file()


def _crafted_checkpoint(path, target="shutil.copy"):
    """A litlab-looking checkpoint whose stored data config would call `target`."""
    victim = path.parent / "victim.txt"
    victim.write_text("secret")
    config = {
        "data": {"_target_": target, "src": str(victim), "dst": str(path.parent / "copied")},
        "model": {"_target_": "litlab.domains.vision.module.ImageClassifier"},
    }
    torch.save({"state_dict": {}, "litlab_config": config}, path)
    return path.parent / "copied"


def test_crafted_checkpoint_runs_no_code_in_eval(tmp_path, capfd):
    """eval.py's command (`cli.run(main)`, argv and all) in this process: the refusal and its
    exit code, without a new interpreter's imports (a subprocess per entry point elsewhere)."""
    copied = _crafted_checkpoint(tmp_path / "evil.ckpt")
    code, err = run_in_process("eval.py", [f"ckpt_path={tmp_path / 'evil.ckpt'}"], tmp_path, capfd)
    assert code == 2, err[-3000:]
    assert err.count("\n") == 1 and "data._target_=shutil.copy" in err, err
    assert "trust_checkpoint=true" in err
    assert not copied.exists(), "the checkpoint ran code"


@pytest.mark.parametrize(
    "target",
    [
        "shutil.copy",
        "os.system",
        "litlab.checkpointing.atomic_io.os.remove",
        "torch.load",
        "builtins.exec",
    ],
)
def test_load_run_refuses_targets_outside_the_allowlist(tmp_path, target):
    from litlab.errors import UserError
    from litlab.runs.rebuild import load_run

    copied = _crafted_checkpoint(tmp_path / "evil.ckpt", target)
    with pytest.raises(UserError, match=f"data._target_={target}.*trust"):
        load_run(tmp_path / "evil.ckpt")
    assert not copied.exists()


def test_allowlist_admits_every_target_of_litlabs_own_configs():
    """Each `_target_` of configs/data and configs/model is a kind a stored config may build
    where it sits: datamodules at data, LightningModules at model, nets/optimizers/schedulers
    inside the model."""
    import re

    from litlab.checkpointing import trust

    def names(folder):
        return {
            m
            for p in (ROOT / "configs" / folder).rglob("*.yaml")
            for m in re.findall(r"_target_: *([\w.]+)", p.read_text())
        }

    modules = {n for n in names("model") if n.startswith("litlab.models.") and ".nets." not in n}
    refused = {n: trust.target_refusal(n, trust.ROOTS["data"]) for n in names("data")}
    refused |= {n: trust.target_refusal(n, trust.ROOTS["model"]) for n in modules}
    refused |= {n: trust.target_refusal(n, trust.PARTS) for n in names("model") - modules}
    assert len(refused) > 25 and refused == dict.fromkeys(refused)


def test_multirun_resume_is_refused_in_one_line(tmp_path):
    p = run_cli("train.py", "ckpt_path=last", "-m", log_dir=tmp_path, check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "ckpt_path=last cannot be used with -m" in p.stderr


@pytest.mark.parametrize(
    "experiment, dataset",
    [
        pytest.param("gin_mutag", "MUTAG", marks=pytest.mark.slow),
        pytest.param("gin_proteins", "PROTEINS_full", marks=pytest.mark.slow),
    ],
)
def test_xu_protocol_command_runs_under_multirun(tmp_path, shared_data, experiment, dataset):
    """README/docs/graph.md: experiment=gin_mutag|gin_proteins data.val_fraction=0
    callbacks.model_checkpoint=null, as a 2-fold sweep of one epoch each (PROTEINS: on the
    fold split and seed of the published figure)."""
    data = shared_data(f"TUDataset/{dataset}").parents[1]
    split = ["data.seed=1000", "seed=1000"] if experiment == "gin_proteins" else []
    run_cli(
        "train.py",
        f"paths.data_dir={data}",
        f"experiment={experiment}",
        *split,
        "data.val_fraction=0",
        "callbacks.model_checkpoint=null",
        "data.fold=0,1",
        "trainer.max_epochs=1",
        "-m",  # after the overrides: argparse takes it anywhere but between them
        log_dir=tmp_path / "logs",
        timeout=300,
    )
    [sweep] = (tmp_path / "logs" / "train" / "multiruns").glob("*")
    rows = pd.read_csv(sweep / "summary.csv")
    assert list(rows["status"]) == ["completed", "completed"], rows
    # val/acc is computed on the test fold (Xu et al.): the two are equal
    assert (rows["val/acc"] == rows["test/acc"]).all()


@pytest.mark.slow  # run by .ci/run's second stage (keeps `make test` within 5 minutes)
def test_checkpoint_of_another_net_is_refused_naming_it(tmp_path, capfd):
    """Resuming a cnn checkpoint with other channels: one line naming the net it holds. The run
    that makes the checkpoint runs in this process (helpers.here); the refusal, whose console
    is checked, in its own."""
    tiny = [
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=1",
        "trainer.limit_val_batches=1",
        "test=false",
    ]
    p = train_here(tmp_path / "a", *tiny, "model.net.channels=[8,16]", capfd=capfd)
    assert p.returncode == 0, p.stderr[-3000:]
    ckpt = run_dirs(tmp_path / "a")[0] / "checkpoints" / "last.ckpt"
    p = train(tmp_path / "b", *tiny, "trainer.max_epochs=2", f"ckpt_path={ckpt}")
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the checkpoint holds another net"), lines
    assert "channels=[8, 16]" in lines[0] and "has shape" in lines[0]
    assert run_dirs(tmp_path / "b") == []


@pytest.mark.slow  # a training subprocess in a user namespace: .ci/run's second stage
def test_a_full_disk_is_one_line_and_exit_1(tmp_path):
    """The log dir on a 300 kB tmpfs (a user namespace mounts it without root): the first
    checkpoint does not fit. torch reports it as a RuntimeError around the OSError: the
    console gets one line naming the full disk, not a 60-line traceback. (A disk that fills
    after checkpoints were written: test_errors_after_a_checkpoint_keep_the_run_...)"""
    import shutil
    import subprocess
    import sys

    mount = tmp_path / "small"
    mount.mkdir()
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=300k tmpfs {mount}"],
        capture_output=True,
    )
    if shutil.which("unshare") is None or probe.returncode != 0:
        pytest.skip(f"no user namespaces here to mount a small tmpfs: {probe.stderr[-200:]!r}")
    train = (
        f"{sys.executable} src/train.py paths.log_dir={mount} trainer.max_epochs=1 "
        "extras.print_config=false callbacks.rich_progress_bar=null"
    )
    p = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=300k tmpfs {mount} && {train}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: the disk is full"), lines
    # nothing to resume from: the message does not send the user to ckpt_path=last
    assert lines[0].endswith("free space, then run again (no checkpoint was written)"), lines
