"""Refused commands, `--cfg job` and the default job of two checkouts, interleaved: the
before/after of a change to start-up measured in one run, so that the machine's load hits
both alike (the figures of BENCHMARKS.md "One composition, not two" and, with `--libraries`,
"MONAI and Ray start sooner"; with `--exit`, "The garbage collector at start-up": how long a
run takes from its last printed line to its end).

    git worktree add /tmp/before <rev> && ln -s "$PWD/.venv" /tmp/before/.venv
    .venv/bin/python bench/startup_ab.py /tmp/before . [--repeat 5] [--default 3]
    .venv/bin/python bench/startup_ab.py /tmp/before . --libraries --repeat 3
    .venv/bin/python bench/startup_ab.py /tmp/before . --exit --repeat 5

Each command runs in its own checkout with that checkout's `src` on PYTHONPATH; wall and CPU
(user + sys of the child) are medians.
"""

import argparse
import os
import resource
import subprocess
import time
from pathlib import Path

from common import PY, median, table

REFUSED = [
    ["src/train.py", "model=gnn", "data=digits"],
    ["src/train.py", "model.optimizer.lr=fast"],
    ["src/train.py", "trainer.precision=16-mixed"],
    ["src/train.py", "seed=-5"],
    ["src/eval.py", "ckpt_path=/nonexistent/x.ckpt"],
]
CFG_JOB = ["src/train.py", "--cfg", "job"]
DEFAULT_JOB = ["src/train.py"]
#: short jobs whose start-up imports MONAI (a 3D U-Net) or starts Ray (a federated run)
LIBRARY_JOBS = [
    ["src/train.py", "model=unet3d", "trainer.max_epochs=1", "trainer.limit_train_batches=2"],
    ["src/federate.py", "federate.rounds=1", "federate.num_clients=2", "federate.local_epochs=1"],
]
#: runs timed from their last printed line to their end as well (`--exit`)
EXIT_JOBS = [["src/train.py", "trainer.max_epochs=1"], DEFAULT_JOB]


def _timed(tree: Path, args: list[str], expect: int, log_dir: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of `python <args>` in `tree`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [PY, *args] if "--cfg" in args else [PY, *args, f"paths.log_dir={log_dir}"]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(
            f"{tree}: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def _exit_timed(tree: Path, args: list[str], log_dir: Path) -> tuple[float, float, float]:
    """(seconds from the last line the run printed to its end, wall, CPU) of `python <args>`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    cmd = [PY, *args, f"paths.log_dir={log_dir}"]
    start = last = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for _ in proc.stdout:
        last = time.perf_counter()
    if proc.wait() != 0:
        raise SystemExit(f"{tree}: {' '.join(cmd)} exited {proc.returncode}")
    end = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return end - last, end - start, cpu


def exit_table(trees: dict[str, Path], runs: int, log_dir: Path) -> str:
    rows = []
    for cmd in EXIT_JOBS:
        seen = {name: [] for name in trees}
        for _ in range(runs):
            for name, tree in trees.items():
                seen[name].append(_exit_timed(tree, cmd, log_dir / name))
        cells = [
            " / ".join(f"{median(t[i] for t in seen[n]):.2f}" for i in range(3)) for n in trees
        ]
        rows.append([f"`python {' '.join(cmd)}`", *cells])
    header = "last line to end / wall / CPU (s)"
    return table(["command", f"before: {header}", f"after: {header}"], rows)


def _compiled(tree: Path) -> None:
    """Each checkout's `src` compiled to bytecode first. A fresh worktree has none, and with
    PYTHONDONTWRITEBYTECODE set (as on the machines these figures come from) Python compiles
    every litlab module again at each command, ~0.05-0.1 s of each refusal's second that the
    other checkout, with its `__pycache__` from earlier runs, did not pay."""
    subprocess.run(
        [PY, "-m", "compileall", "-q", str(tree / "src")], check=True, stdout=subprocess.DEVNULL
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--default", type=int, default=3, help="runs of the default job")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/startup_ab"))
    parser.add_argument("--libraries", action="store_true", help="the MONAI and Ray jobs only")
    parser.add_argument("--exit", action="store_true", help="runs' ends: EXIT_JOBS only")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for tree in trees.values():  # the same bytecode state in both: see _compiled
        _compiled(tree)
    if args.exit:
        print(exit_table(trees, args.repeat, args.log_dir))
        return
    plan = [(c, 2, args.repeat) for c in REFUSED] + [(CFG_JOB, 0, args.repeat)]
    plan += [(DEFAULT_JOB, 0, args.default)] if args.default else []
    if args.libraries:
        plan = [(job, 0, args.repeat) for job in LIBRARY_JOBS]
    rows = []
    for cmd, expect, runs in plan:
        seen = {name: [] for name in trees}
        for _ in range(runs):
            for name, tree in trees.items():
                seen[name].append(_timed(tree, cmd, expect, args.log_dir / name))
        cells = [
            f"{median(w for w, _ in seen[n]):.2f} / {median(c for _, c in seen[n]):.2f}"
            for n in trees
        ]
        rows.append([f"`python {' '.join(cmd)}`", *cells])
    print(table(["command", "before: wall / CPU (s)", "after: wall / CPU (s)"], rows))


if __name__ == "__main__":
    main()
