"""The same sweep run one job at a time (Hydra's basic launcher) and N at once
(`hydra/launcher=parallel`), side by side: wall time of the whole command, and each job's
test metrics, which must be identical.

    .venv/bin/python bench/parallel_sweep.py                      # 2 jobs, 2 at once, 3 repetitions
    .venv/bin/python bench/parallel_sweep.py --jobs 4 --epochs 2 --reps 1
    .venv/bin/python bench/parallel_sweep.py --epochs 100 --reps 2 callbacks.early_stopping=null

Both launchers run each job with `threads=1` (one core each: on 2 cores, 2 jobs at once fill
the machine, and equal threads give bit-equal metrics). The two commands alternate, so a change
in the machine's load (shared machines) hits both alike; the ratio is of the medians. The
figures are in BENCHMARKS.md ("Parallel sweeps").
"""

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

from common import PY, median, table, time_command


def sweep(
    launcher: list[str], seeds: str, epochs: int, log_dir: Path, extra: list[str]
) -> tuple[float, list]:
    """(wall seconds, [(job, test metrics)]) of one `train.py -m` sweep."""
    cmd = [PY, "src/train.py", "-m", *launcher, f"seed={seeds}", f"trainer.max_epochs={epochs}"]
    cmd += extra
    cmd += ["threads=1", "extras.print_config=false", "callbacks.rich_progress_bar=null"]
    cmd += [f"paths.log_dir={log_dir}"]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    wall, _ = time_command(cmd, env=env)
    [folder] = (log_dir / "train" / "multiruns").iterdir()
    with open(folder / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert all(r["status"] == "completed" for r in rows), rows
    metrics = [(r["job"], {k: r[k] for k in r if k.startswith("test/")}) for r in rows]
    return wall, metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2, help="jobs in the sweep (seeds 1..N)")
    parser.add_argument("--n-jobs", type=int, default=2, help="jobs at once (parallel)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="more overrides for every job")
    args = parser.parse_args()
    seeds = ",".join(str(s) for s in range(1, args.jobs + 1))
    launchers = {
        "sequential (basic)": [],
        f"parallel, n_jobs={args.n_jobs}": [
            "hydra/launcher=parallel",
            f"hydra.launcher.n_jobs={args.n_jobs}",
        ],
    }
    walls: dict[str, list[float]] = {name: [] for name in launchers}
    results: dict[str, list] = {}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for i, (name, launcher) in enumerate(launchers.items()):
                load = os.getloadavg()[0]
                log_dir = Path(tmp) / f"rep{rep}-launcher{i}"
                wall, metrics = sweep(launcher, seeds, args.epochs, log_dir, args.overrides)
                walls[name].append(wall)
                if results.setdefault(name, metrics) != metrics:
                    raise SystemExit(f"{name}: metrics changed between repetitions")
                rows.append([rep, name, f"{load:.2f}", f"{wall:.1f}"])
                print(f"rep {rep} {name}: {wall:.1f} s (load before {load:.2f})", flush=True)
    sequential, parallel = (median(w) for w in walls.values())
    same = len(set(map(repr, results.values()))) == 1
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.jobs} jobs, "
          f"{args.epochs} epochs, {os.cpu_count()} CPUs, overrides: {args.overrides}")  # fmt: skip
    print(table(["rep", "launcher", "load before", "wall (s)"], rows))
    print(
        f"\nmedian: sequential {sequential:.1f} s, parallel {parallel:.1f} s, "
        f"ratio {parallel / sequential:.2f}x; per-job test metrics identical: {same}"
    )
    for job, metrics in next(iter(results.values())):
        print(f"  job {job}: {metrics}")


if __name__ == "__main__":
    main()
