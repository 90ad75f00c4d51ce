"""The default job, timed as a user runs it: `python src/train.py` (bar: <= 30 s on 2 cores,
test accuracy >= 98.5%).

    .venv/bin/python bench/default_run.py [--seeds 42 1 2]

Each run is the full command (start-up, data, 30 epochs, test of the best checkpoint); the
first seed is the default. Prints wall time and test accuracy per seed, and their medians.
"""

import argparse
import tempfile

from common import PY, median, table, time_command


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    args = parser.parse_args()
    rows, walls, accs = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            wall, proc = time_command([PY, "src/train.py", f"seed={seed}", f"paths.log_dir={tmp}"])
            acc = float(
                next(
                    ln.split()[-1]
                    for ln in proc.stdout.splitlines()
                    if ln.strip().startswith("test/acc")
                )
            )
            walls.append(wall)
            accs.append(acc)
            rows.append([seed, f"{wall:.1f}", f"{100 * acc:.2f}%"])
    rows.append(["**median**", f"**{median(walls):.1f}**", f"**{100 * median(accs):.2f}%**"])
    print(table(["seed", "wall (s)", "test acc"], rows))
    ok = median(walls) <= 30 and min(accs) >= 0.985
    print(f"\nbar: wall <= 30 s and test acc >= 98.5% on every seed: {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
