"""What report.html costs: the time to write the report of a run and of a sweep, and the page's
size (a sweep writes its report at its end: this is the time added to every sweep).

    OMP_NUM_THREADS=1 .venv/bin/python bench/report.py [--repeats 5]

Trains a tiny `callbacks=inspect` digits run and a 4-job grid sweep (2 epochs of 3 batches),
then writes each report in this process, which has imported torch, Lightning and scikit-learn
already (as a sweep's process has): the first write (plotly imported then) and the median of
the next `--repeats`, wall and CPU seconds.
"""

import argparse
import tempfile
import time
from pathlib import Path

from common import PY, median, table, time_command

FAST = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.num_sanity_val_steps=0",
    "data.num_workers=0",
    "extras.print_config=false",
    "callbacks.rich_progress_bar=null",
]


def timed(write, folder: Path) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    write(folder)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import lightning  # noqa: F401  (what a sweep's process has imported before its end)
    import sklearn  # noqa: F401
    import torch  # noqa: F401

    from litlab import report

    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        time_command([PY, "src/train.py", f"paths.log_dir={logs}", "callbacks=inspect", *FAST])
        grid = ["model.optimizer.lr=1e-3,3e-3", "seed=0,1"]
        time_command([PY, "src/train.py", "-m", f"paths.log_dir={logs}", *grid, *FAST])
        run = next((logs / "train" / "runs").iterdir())
        sweep = next((logs / "train" / "multiruns").iterdir())
        rows = []
        for name, folder in (("run (callbacks=inspect)", run), ("sweep (4 jobs, grid)", sweep)):
            first = timed(report.write_report, folder)
            rest = [timed(report.write_report, folder) for _ in range(args.repeats)]
            size = (folder / "report.html").stat().st_size / 2**20
            rows.append(
                [
                    name,
                    f"{first[0]:.2f} / {first[1]:.2f}",
                    f"{median(r[0] for r in rest):.2f} / {median(r[1] for r in rest):.2f}",
                    f"{size:.2f}",
                ]
            )
    header = ["report of", "first write s (wall / CPU)", "next writes, median s", "MiB"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
