"""Sweep dirs made of job records (no training) for the report's tests: jobs in any state,
and a k-fold sweep whose summary and statistics the sweep's own code writes."""

import json
from pathlib import Path

# 5 folds x 2 dropouts; fold 2 is hard for both (what a paired comparison takes out)
FOLDS = {"0.3": [0.95, 0.97, 0.80, 0.96, 0.94], "0.1": [0.94, 0.97, 0.78, 0.95, 0.94]}


def sweep_record(job: int, status: str, objective, **extra) -> dict:
    """A job's sweep_job.json as the sweep writes it (`extra` replaces fields)."""
    return {
        "job": job,
        "overrides": [
            "trainer.max_epochs=1",
            f"model.optimizer.lr={0.001 * (job + 1)}",
            f"seed={job % 2}",
        ],
        "objective_name": "val/acc",
        "mode": "max",
        "run_dir": "/somewhere/else",
        "metrics": {"val/acc": objective, "test/acc": objective} if objective else {},
        "objective": objective,
        "error": "",
        "wall_s": 1.5,
        "status": status,
        **extra,
    }


def fake_sweep(root: Path, records: list) -> Path:
    sweep = root / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    for i, record in enumerate(records):
        (sweep / str(i)).mkdir()
        (sweep / str(i) / "sweep_job.json").write_text(json.dumps(record))
    return sweep


def fold_sweep(root: Path, folds: dict[str, list[float]], plot: bool = False) -> Path:
    """A sweep dir of `-m model.net.dropout=... data.fold=range(k)` and its summary (written
    by the sweep's own summary from the job records, no training)."""
    from litlab.sweeps.summary import load_records, write_summary

    records = []
    for dropout, values in folds.items():
        for fold, value in enumerate(values):
            job = len(records)
            overrides = ["data.num_folds=5", f"model.net.dropout={dropout}", f"data.fold={fold}"]
            record = sweep_record(job, "completed", value, overrides=overrides)
            records.append(record | {"run_dir": str(root / "sweep" / str(job))})
    sweep = fake_sweep(root, records)
    write_summary(sweep, load_records(sweep), plot=plot)
    return sweep
