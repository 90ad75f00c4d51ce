"""What `callbacks=inspect` costs the default job (bar: <= 15% more wall time).

    OMP_NUM_THREADS=1 .venv/bin/python bench/inspect_cost.py [--pairs 3]

Runs `python src/train.py` and `python src/train.py callbacks=inspect` in alternation (pairs,
so a busy shared machine slows both alike), full commands (start-up, 30 epochs, test). Prints
each pair's wall and CPU (user + sys) seconds and their ratios, the medians, and the medians of
the paired ratios. The bar is checked on the wall ratio; on a shared, overloaded machine wall
times swing by tens of percent between runs, and the CPU-time ratio (what the process itself
spent) is the steadier figure.
"""

import argparse
import resource
import tempfile

from common import PY, median, table, time_command


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    rows, cols = [], {k: [] for k in ("wall0", "wall1", "cpu0", "cpu1", "rwall", "rcpu")}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            walls, cpus = [], []
            for extra in ([], ["callbacks=inspect"]):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                wall, _ = time_command([PY, "src/train.py", f"paths.log_dir={tmp}", *extra])
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                walls.append(wall)
                cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            values = [*walls, *cpus, walls[1] / walls[0], cpus[1] / cpus[0]]
            for key, v in zip(cols, values):
                cols[key].append(v)
            rows.append(
                [i + 1, *(f"{v:.1f}" for v in values[:4]), *(f"{v:.3f}" for v in values[4:])]
            )
    meds = [median(v) for v in cols.values()]
    rows.append(
        ["**median**", *(f"**{v:.1f}**" for v in meds[:4]), *(f"**{v:.3f}**" for v in meds[4:])]
    )
    print(
        table(
            [
                "pair",
                "default wall (s)",
                "inspect wall (s)",
                "default CPU (s)",
                "inspect CPU (s)",
                "wall ratio",
                "CPU ratio",
            ],
            rows,
        )
    )
    ok = meds[4] <= 1.15
    print(
        f"\nbar: callbacks=inspect <= 1.15x the default job's wall time: "
        f"{'PASS' if ok else 'FAIL'} (CPU-time ratio {meds[5]:.3f})"
    )


if __name__ == "__main__":
    main()
