"""A grid sweep stopped and resumed against the same sweep run without a stop (issue #36):

    OMP_NUM_THREADS=1 .venv/bin/python bench/sweep_resume.py

A 4-job tiny digits sweep (seed=1,2 x lr=0.01,0.02) runs once without a stop; the same sweep
runs again and gets SIGTERM in its third job (tests/faults.py, `FAULT_JOB=2`: the job saves
last.ckpt and the sweep exits 143), then the command it printed resumes it. Printed: how many
completed jobs the resume trained again (a job whose checkpoints changed), how many it ran,
whether the two summaries are equal (status, objective and every metric of each job), and the
wall times. Both sweeps carry the fault callback (inactive without FAULT), so their settings
are the same.
"""

import argparse
import csv
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "extras.print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.model_summary=null",
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=5",
    "trainer.limit_val_batches=3",
    "trainer.limit_test_batches=3",
    "trainer.num_sanity_val_steps=0",
    "seed=1,2",
    "model.optimizer.lr=0.01,0.02",
    "+callbacks.fault._target_=faults.EnvFault",
]
VARIES = ("wall_s", "run_dir", "error")  # what may differ between two equal sweeps


def run(cmd: list[str], env=None) -> tuple[float, subprocess.CompletedProcess]:
    full = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT / "tests"), **(env or {})}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=full)
    return time.perf_counter() - start, proc


def sweep(log_dir: Path, sweep_dir: Path) -> list[str]:
    return [
        sys.executable,
        "src/train.py",
        "-m",
        f"paths.log_dir={log_dir}",
        *TINY,
        f"hydra.sweep.dir={sweep_dir}",
    ]


def summary(sweep_dir: Path) -> list[dict]:
    with open(sweep_dir / "summary.csv") as f:
        return [{k: v for k, v in r.items() if k not in VARIES} for r in csv.DictReader(f)]


def checkpoints(sweep_dir: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(sweep_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sweep_dir.glob("*/checkpoints/*.ckpt")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--step", type=int, default=7, help="optimizer step of job 2 that gets SIGTERM"
    )
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="sweep_resume_")) / "logs"
    whole_s, whole = run(sweep(log_dir, log_dir / "train" / "multiruns" / "whole"))
    assert whole.returncode == 0, whole.stderr[-2000:]
    stopped_dir = log_dir / "train" / "multiruns" / "stopped"
    stop_s, stopped = run(
        sweep(log_dir, stopped_dir), env={"FAULT": f"sigterm@train:{args.step}", "FAULT_JOB": "2"}
    )
    assert stopped.returncode == 143, (stopped.returncode, stopped.stderr[-2000:])
    before = [r["status"] for r in summary(stopped_dir)]
    printed = re.search(r"run the rest with: (.+)$", stopped.stderr, re.MULTILINE).group(1)
    done = {
        k: v
        for k, v in checkpoints(stopped_dir).items()
        if before[int(k.split("/")[0])] == "completed"
    }
    resume_s, resumed = run([sys.executable, *shlex.split(printed)[1:]])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = checkpoints(stopped_dir)
    again = {k.split("/")[0] for k, v in done.items() if after.get(k) != v}
    ran = len(set(re.findall(r"^  run dir +(\S+)", resumed.stdout, re.MULTILINE)))
    equal = summary(stopped_dir) == summary(log_dir / "train" / "multiruns" / "whole")
    objectives = [
        (a["objective"], b["objective"])
        for a, b in zip(summary(log_dir / "train" / "multiruns" / "whole"), summary(stopped_dir))
    ]
    print(f"stopped sweep's jobs: {', '.join(before)}")
    print(f"completed jobs trained again by the resume: {len(again)} (jobs run by it: {ran} of 4)")
    print(f"summaries equal (status, objective, every metric of each job): {equal}")
    print(
        "objective per job, uninterrupted vs stopped+resumed: "
        + "; ".join(f"{i}: {a} / {b}" for i, (a, b) in enumerate(objectives))
    )
    print(f"wall: uninterrupted {whole_s:.1f} s; stopped {stop_s:.1f} s + resume {resume_s:.1f} s")


if __name__ == "__main__":
    main()
