"""The SLURM requeue run that the requeue and code-snapshot tests share."""

import csv

RUN = [
    "logger=many",
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.num_sanity_val_steps=0",
    "callbacks.early_stopping=null",
]


def val_epochs(run) -> list[int]:
    with open(run / "csv" / "metrics.csv") as f:
        return [int(float(r["epoch"])) for r in csv.DictReader(f) if r.get("val/acc")]
