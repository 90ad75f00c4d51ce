"""Failure is a tested feature: real `kill -9`, Ctrl-C, OOM and NaN in the middle of a real
run, then `ckpt_path=last` / `ckpt_path=<run dir>`, must end with the very same weights and
test metrics as a run that was never interrupted; a dying DDP rank ends the job."""

import time

import pytest
import torch
from helpers.reliability import (
    assert_same_as_reference,
    load,
    train,
    train_here,
)
from helpers.runs import run_dirs

from litlab.config.compose import compose

# one worker runs this module, so its module-scoped fixtures are built once (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("reliability")


@pytest.mark.slow  # make test's 5 minutes: the slow stage runs it
def test_resume_after_kill_9_is_bit_identical(tmp_path, ref_run, capfd):
    """kill -9 mid-epoch, resume, kill -9 right after a checkpoint, resume: same weights. The
    last resume, which nothing stops, runs in this process (helpers.here)."""
    logs = tmp_path / "logs"
    last = lambda: load(run_dirs(logs)[0] / "checkpoints" / "last.ckpt")  # noqa: E731
    p = train(logs, fault=(5, "sigkill"))  # step 5 of epoch 0; last.ckpt was written at step 4
    assert p.returncode == -9 and last()["global_step"] == 4
    p = train(logs, "ckpt_path=last", fault=(8, "sigkill"))  # resumes mid-epoch
    assert p.returncode == -9 and last()["global_step"] == 8, p.stderr[-3000:]
    run = run_dirs(logs)[0]
    p = train_here(logs, f"ckpt_path={run}", capfd=capfd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert run_dirs(logs) == [run], "every resume continued in the same run dir"
    assert_same_as_reference(run, ref_run)


@pytest.mark.slow
def test_resume_after_six_failures_is_bit_identical(tmp_path, ref_run, capfd):
    """One run broken six ways in a row, resumed each time, equals an unbroken run (the last
    resume, which nothing breaks, in this process: helpers.here)."""
    logs = tmp_path / "logs"
    last = lambda: load(run_dirs(logs)[0] / "checkpoints" / "last.ckpt")  # noqa: E731

    p = train(logs, fault=(5, "sigkill"))  # kill -9 mid-epoch
    assert p.returncode == -9 and last()["global_step"] == 4
    p = train(logs, "ckpt_path=last", fault=(8, "sigkill"))  # right after the step-8 save
    assert p.returncode == -9 and last()["global_step"] == 8
    run = run_dirs(logs)[0]
    p = train(logs, f"ckpt_path={run}", fault=(11, "kill_during_save"))  # during the step-12 save
    assert p.returncode == -9 and last()["global_step"] == 8
    # NaN loss at step 13: one line naming the step, last.ckpt (step 12) kept
    p = train(logs, "ckpt_path=last", fault=(13, "nan_input"))
    assert p.returncode == 1, p.stderr[-3000:]
    error = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(error) == 1 and "global step 13" in error[0] and "nan" in error[0], p.stderr[-2000:]
    assert last()["global_step"] == 12
    # Ctrl-C at step 14: the batch finishes, last.ckpt at step 15, exit 1
    p = train(logs, "ckpt_path=last", fault=(14, "sigint"))
    assert p.returncode == 1 and last()["global_step"] == 15, p.stderr[-3000:]
    # out of memory at the start of step 16: last.ckpt written from the state before it
    p = train(logs, "ckpt_path=last", fault=(16, "oom"))
    assert p.returncode == 1 and last()["global_step"] == 16, p.stderr[-3000:]
    p = train_here(logs, "ckpt_path=last", capfd=capfd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert run_dirs(logs) == [run], "every resume continued in the same run dir"
    assert_same_as_reference(run, ref_run)


def test_atomic_checkpoint_io_keeps_old_file_on_failure(tmp_path):
    from litlab.checkpointing.atomic_io import AtomicCheckpointIO

    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"w": torch.ones(3)}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        io.save_checkpoint({"w": torch.zeros(3), "bad": Unpicklable()}, path)
    assert torch.equal(load(path)["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_ckpt_path_last_or_a_run_dir_picks_that_run_dir_when_the_config_is_composed(tmp_path):
    """hydra/resumable.yaml: the run dir is chosen from the one composed config (not composed
    twice); the recipe then reads that run's last.ckpt, or refuses in one line."""
    from litlab.checkpointing.resume import resolve_checkpoint
    from litlab.errors import UserError

    runs = tmp_path / "train" / "runs"
    old, new = runs / "2026-01-01_00-00-00", runs / "2026-01-02_00-00-00"
    for run in (old, new):
        (run / "checkpoints").mkdir(parents=True)
        (run / "checkpoints" / "last.ckpt").touch()

    def resolved(*overrides):
        cfg = compose("train", [f"paths.log_dir={tmp_path}", *overrides])
        run_dir, subdir = cfg.hydra.run.dir, cfg.hydra.output_subdir  # what Hydra resolves
        resolve_checkpoint(cfg)
        return run_dir, subdir, cfg.ckpt_path

    run_dir, subdir, ckpt = resolved("ckpt_path=last")
    assert (run_dir, ckpt) == (str(new), str(new / "checkpoints" / "last.ckpt"))
    assert subdir.startswith(".hydra/resume-")  # the first run's .hydra/config.yaml is kept
    assert resolved(f"ckpt_path={old}")[::2] == (str(old), str(old / "checkpoints" / "last.ckpt"))
    file = str(old / "checkpoints" / "last.ckpt")  # a file: a new run dir, as in Lightning
    run_dir, subdir, ckpt = resolved(f"ckpt_path={file}")
    assert run_dir.startswith(str(runs)) and run_dir not in (str(old), str(new))
    assert (subdir, ckpt) == (".hydra", file)
    with pytest.raises(UserError, match="no run of task 'train'"):
        resolved(f"paths.log_dir={tmp_path / 'empty'}", "ckpt_path=last")
    with pytest.raises(UserError, match="folder without checkpoints/last.ckpt"):
        resolved(f"ckpt_path={runs}")


@pytest.mark.slow  # run by .ci/run's second stage (keeps `make test` within 5 minutes)
def test_dead_ddp_rank_ends_the_job(tmp_path):
    """Rank 1 is killed (-9) at step 2 of a 2-process CPU DDP run: the job exits != 0, no hang."""
    start = time.perf_counter()
    p = train(
        tmp_path,
        "++trainer.strategy=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        "+callbacks.fault._target_=faults.Fault",
        "+callbacks.fault.step=2",
        "+callbacks.fault.kind=sigkill",
        "+callbacks.fault.rank=1",
        timeout=300,
    )
    elapsed = time.perf_counter() - start
    assert p.returncode not in (0, 2), p.stderr[-3000:]  # 2 would be a config error
    # gloo reports the lost peer at once; else Lightning's process observer kills the job (-9)
    assert "by peer" in p.stderr or p.returncode == -9, p.stderr[-3000:]  # closed or reset
    assert elapsed < 240, f"took {elapsed:.0f} s to notice the dead rank"


def test_last_checkpoint_is_always_there_and_takes_steps(tmp_path):
    """callbacks.last_checkpoint writes last.ckpt every epoch (also with model_checkpoint=null);
    every_n_train_steps=N adds a save every N steps; model_checkpoint keeps only the best."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from litlab.checkpointing.resume_state import LastCheckpoint
    from litlab.config import build

    def checkpoints(*overrides):
        cfg = compose("train", ["trainer.accelerator=cpu", *overrides], output_dir=tmp_path)
        return [c for c in build.trainer(cfg).callbacks if isinstance(c, ModelCheckpoint)]

    last = [c for c in checkpoints() if isinstance(c, LastCheckpoint)]
    assert len(last) == 1 and last[0].save_last and last[0]._every_n_epochs == 1
    assert [c.save_last for c in checkpoints() if not isinstance(c, LastCheckpoint)] == [False]
    assert len(checkpoints("callbacks.model_checkpoint=null")) == 1
    steps = [
        c
        for c in checkpoints("callbacks.last_checkpoint.every_n_train_steps=7")
        if c._every_n_train_steps == 7
    ]
    assert len(steps) == 1
