"""What `callbacks=inspect` costs the default job (bar: <= 15% more wall time).

    OMP_NUM_THREADS=1 .venv/bin/python bench/inspect.py [--pairs 3]

Runs `python src/train.py` and `python src/train.py callbacks=inspect` in alternation (pairs,
so a busy shared machine slows both alike), full commands (start-up, 30 epochs, test). Prints
each pair's walls and ratio, the medians, and the median of the paired ratios (the figure the
bar is checked on).
"""
import argparse
import tempfile

from common import PY, median, table, time_command


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    rows, base, insp, ratios = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            walls = []
            for extra in ([], ["callbacks=inspect"]):
                wall, _ = time_command([PY, "src/train.py", f"paths.log_dir={tmp}", *extra])
                walls.append(wall)
            base.append(walls[0])
            insp.append(walls[1])
            ratios.append(walls[1] / walls[0])
            rows.append([i + 1, f"{walls[0]:.1f}", f"{walls[1]:.1f}", f"{ratios[-1]:.3f}"])
    rows.append(["**median**", f"**{median(base):.1f}**", f"**{median(insp):.1f}**",
                 f"**{median(ratios):.3f}**"])
    print(table(["pair", "default (s)", "callbacks=inspect (s)", "ratio"], rows))
    ok = median(ratios) <= 1.15
    print(f"\nbar: callbacks=inspect <= 1.15x the default job: {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
