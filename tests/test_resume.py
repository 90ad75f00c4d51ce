"""Resuming as the README shows it, beyond the kill -9 chain of test_reliability.py: continue a
finished run for one more epoch in its own run dir (TensorBoard and checkpoints continue),
branch a new run from a checkpoint file, and, under DDP, survive the death of rank 0."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers.runs import QUIET, ROOT, run_dirs

from litlab.config.compose import compose

# the README's "any key" command, on 4 batches of 32 per epoch; last.ckpt at each epoch's end
RUN = [
    "trainer=cpu",
    "seed=7",
    "model.optimizer.lr=0.01",
    "logger=tensorboard",
    "data.batch_size=32",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "callbacks.last_checkpoint.every_n_train_steps=4",
    "callbacks.early_stopping=null",
    "callbacks.model_summary=null",
]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "PYTHONUNBUFFERED": "1"}


def _command(log_dir: Path, *overrides: str) -> list[str]:
    """What `train` runs (helpers.here runs it in this process)."""
    return [
        sys.executable,
        str(ROOT / "src" / "train.py"),
        f"paths.log_dir={log_dir}",
        *QUIET,
        *overrides,
    ]


def train(log_dir: Path, *overrides: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "src" / "train.py"),
            f"paths.log_dir={log_dir}",
            *QUIET,
            *overrides,
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_step(run: Path) -> int:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]


def tensorboard_steps(run: Path, tag: str = "val/acc") -> list[int]:
    """The steps of a scalar over every event file of the run's tensorboard/ folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = []
    for events in sorted((run / "tensorboard").rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            steps += [e.step for e in acc.Scalars(tag)]
    return steps


@pytest.mark.slow  # make test's 5 minutes: the slow stage runs it
def test_continue_a_finished_run_then_branch_from_its_file(tmp_path, capfd):
    """3 epochs; `ckpt_path=last trainer.max_epochs=4` trains one more in the same run dir
    (TensorBoard continues: 4 validations, steps increasing); `ckpt_path=<file>
    trainer.max_epochs=5` starts a new run dir from that state and leaves the first alone. Both
    commands in this process (helpers.here: their real `cli.run`, argv and all)."""
    from helpers.here import run_here

    from litlab.recipes import train_and_test as train_in_process

    logs = tmp_path / "logs"
    run = logs / "train" / "runs" / "2026-01-01_00-00-00"  # the finished run (in this process)
    train_in_process(compose("train", [*RUN, "trainer.max_epochs=3"], output_dir=run))
    assert last_step(run) == 12 and len(tensorboard_steps(run)) == 3

    proc = run_here(_command(logs, *RUN, "ckpt_path=last", "trainer.max_epochs=4"), capfd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dirs(logs) == [run] and last_step(run) == 16
    steps = tensorboard_steps(run)
    assert len(steps) == 4 and steps == sorted(set(steps)) and steps[-1] == 15, steps
    assert tensorboard_steps(run, "test/acc"), "the continued run tested again"

    branch_from = f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"
    proc = run_here(_command(logs, *RUN, branch_from, "trainer.max_epochs=5"), capfd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [branch] = [r for r in run_dirs(logs) if r != run]
    assert last_step(branch) == 20 and last_step(run) == 16
    assert tensorboard_steps(branch) == [19], "the branch logs its own epoch only"


@pytest.mark.slow  # make test's 5 minutes: the slow stage runs it
def test_a_resume_lightning_refuses_leaves_the_finished_run_as_it_was(tmp_path):
    """`ckpt_path=<finished run> trainer.limit_train_batches=0.01`: Lightning refuses the
    setting only when it meets the data, after the logger rewrote its files. One line, exit 2,
    and the run is as it was: same checkpoints, no failed.json, no resume command (it would
    repeat the refused setting), no record of the refused attempt."""
    from litlab.recipes import train_and_test as train_in_process

    logs = tmp_path / "logs"
    run = logs / "train" / "runs" / "2026-01-01_00-00-00"
    train_in_process(compose("train", [*RUN, "trainer.max_epochs=1"], output_dir=run))
    checkpoints = {p: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    proc = train(logs, *RUN, f"ckpt_path={run}", "trainer.limit_train_batches=0.01")
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: Lightning refused a setting") and "resume" not in line, line
    assert {p: p.read_bytes() for p in (run / "checkpoints").iterdir()} == checkpoints
    assert not (run / "failed.json").exists()
    assert not list((run / ".hydra").glob("resume-*")) and run_dirs(logs) == [run]


# DDP: 2 CPU processes; 6 batches of 64 per rank and epoch, last.ckpt every 4 steps
DDP = [
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.max_epochs=2",
    "data.batch_size=64",
    "trainer.limit_train_batches=6",
    "callbacks.last_checkpoint.every_n_train_steps=4",
    "callbacks.early_stopping=null",
    "logger=csv",
    "callbacks.model_summary=null",
]
PROBE = ["+callbacks.rank_probe._target_=ddp_probe.RankProbe"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").is_dir() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


@pytest.mark.slow
def test_dead_rank_0_ends_the_job_and_ddp_resumes_bit_identical(tmp_path):
    """kill -9 of rank 0 (the process the user started) at step 5: rank 1 does not linger;
    `ckpt_path=last` under DDP then ends with the weights of an uninterrupted DDP run."""
    ref = train(tmp_path / "ref", *DDP)
    assert ref.returncode == 0, ref.stderr[-3000:]
    logs, probes = tmp_path / "logs", tmp_path / "probes"
    killed = train(
        logs,
        *DDP,
        "+callbacks.fault._target_=faults.Fault",
        "+callbacks.fault.step=5",
        "+callbacks.fault.kind=sigkill",
        "+callbacks.fault.rank=0",
        *PROBE,
        f"+callbacks.rank_probe.out={probes}",
    )
    assert killed.returncode == -9
    [run] = run_dirs(logs)
    assert last_step(run) == 4
    rank1 = [
        r["pid"]
        for r in map(json.loads, map(Path.read_text, probes.glob("*.json")))
        if r["rank"] == 1
    ]
    assert len(rank1) == 1
    deadline = time.time() + 120
    while alive(rank1[0]) and time.time() < deadline:
        time.sleep(0.5)
    assert not alive(rank1[0]), "rank 1 outlived rank 0 by 2 minutes"

    resumed = train(logs, *DDP, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert run_dirs(logs) == [run]
    ours = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    theirs = torch.load(
        run_dirs(tmp_path / "ref")[0] / "checkpoints" / "last.ckpt", weights_only=True
    )
    assert ours["global_step"] == theirs["global_step"] == 12
    different = [
        k
        for k in theirs["state_dict"]
        if not torch.equal(ours["state_dict"][k], theirs["state_dict"][k])
    ]
    assert not different, f"weights differ: {different[:5]}"


def test_stored_metrics_are_plain_numbers_by_name():
    """The metrics a checkpoint carries for a resume that trains nothing (resume_state): data
    from a file, so only names with plain numbers are taken."""
    from litlab.checkpointing.resume_state import ResumeState, rng_state

    state = ResumeState()
    metrics = {"val/acc": 0.5, "n": 3, "bad": "x", 7: 1.0, "flag": True, "t": [1.0]}
    state.load_state_dict({"rng": rng_state(), "metrics": metrics})
    assert state.resumed_metrics == {"val/acc": 0.5, "n": 3.0}
    state.load_state_dict({"rng": rng_state()})  # a checkpoint from before: none
    assert state.resumed_metrics == {}
