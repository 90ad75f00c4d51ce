"""The faulted runs of the reliability tests: a digits budget with checkpoints every 4 steps,
the command with an injected fault (tests/faults.py), and the check that a resumed run equals
the uninterrupted one (the `ref_run` fixture of conftest.py), weights and metrics."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

from helpers.runs import QUIET, ROOT, csv_test_metrics

# digits, 3 epochs of 6 batches, last.ckpt every 4 steps (and at each epoch end)
BUDGET = [
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=6",
    "data.batch_size=128",
    "callbacks.last_checkpoint.every_n_train_steps=4",
    "callbacks.early_stopping=null",
]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "PYTHONUNBUFFERED": "1"}


def train(
    log_dir: Path, *overrides: str, fault: tuple[int, str] | None = None, timeout=240, env=None
):
    cmd = [
        sys.executable,
        str(ROOT / "src" / "train.py"),
        f"paths.log_dir={log_dir}",
        *QUIET,
        *BUDGET,
        *overrides,
    ]
    if fault:
        cmd += [
            "+callbacks.fault._target_=faults.Fault",
            f"+callbacks.fault.step={fault[0]}",
            f"+callbacks.fault.kind={fault[1]}",
        ]
    return run(cmd, env=env, timeout=timeout)


def run(cmd: list[str], env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=ROOT, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )


def printed(command: str) -> list[str]:
    """A command a run printed (`python src/train.py ...`), as this interpreter runs it."""
    import shlex

    args = shlex.split(command)
    assert args[:2] == ["python", "src/train.py"], command
    return [sys.executable, str(ROOT / "src" / "train.py"), *args[2:]]


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"weights differ: {different[:5]}"


def assert_same_as_reference(run: Path, ref_run: Path) -> None:
    ours, theirs = (load(r / "checkpoints" / "last.ckpt")["state_dict"] for r in (run, ref_run))
    assert_same_weights(theirs, ours)
    assert csv_test_metrics(run) == csv_test_metrics(ref_run)
    epochs = lambda r: set(pd.read_csv(r / "csv" / "metrics.csv")["epoch"].dropna())  # noqa: E731
    assert epochs(run) == epochs(ref_run), "the CSV log continues across resumes"
    assert not list((run / "checkpoints").glob("*.tmp")), "no temp file left behind"


def train_here(log_dir: Path, *overrides: str, capfd=None) -> subprocess.CompletedProcess:
    """`train(log_dir, *overrides)` without a fault, run in this process (helpers.here): for a
    resume to the end or a reference run, whose process is not what a test checks."""
    from helpers.here import run_here

    cmd = [
        sys.executable,
        str(ROOT / "src" / "train.py"),
        f"paths.log_dir={log_dir}",
        *QUIET,
        *BUDGET,
        *overrides,
    ]
    return run_here(cmd, capfd)
