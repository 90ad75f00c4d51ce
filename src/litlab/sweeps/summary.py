"""A Hydra callback that summarises every multirun: summary.csv, summary.md, summary.png and
summary_stats.csv in the sweep dir, plus the table and mean ± std printed at the end.

Each job leaves a record (`sweep_job.json` in its run dir) when it starts and when it ends, so
the summary covers every job of the sweep dir: jobs of a resumed study, of a second worker, or
of a launcher that runs jobs in other processes; a grid sweep's jobs that never started are
listed too (`plan`). It ends with one line per failed job; a stopped sweep (SIGTERM, Ctrl-C)
skips `on_multirun_end`, so the summary is also written at interpreter exit, with the command
that resumes the sweep. Imports stay light: Hydra builds this callback for every run."""

import atexit
import csv
import json
import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from litlab.compat.hydra import job_outcome
from litlab.errors import one_line
from litlab.report import files, write_atomically
from litlab.sweeps import plan, summary_stats
from litlab.sweeps.summary_stats import markdown, marked_best, plot_summary, replica_groups
from litlab.utils import sweep_records
from litlab.utils.distributed import is_rank_zero


def _is_multirun(config: DictConfig) -> bool:
    return OmegaConf.select(config, "hydra.mode") == RunMode.MULTIRUN and is_rank_zero()


def _select(config: DictConfig, key: str, default=None):
    try:
        return OmegaConf.select(config, key, default=default)
    except Exception:  # noqa: BLE001  (an interpolation that cannot resolve here)
        return default


def job_objective_mode(config: DictConfig) -> str:
    """max or min for this job's objective (`summary_stats.objective_mode`)."""
    return summary_stats.objective_mode(
        _select(config, "hydra.sweeper.direction"),
        _select(config, "optimized_metric"),
        _select(config, "model.monitor"),
        _select(config, "model.monitor_mode"),
    )


def status_of(err: BaseException | None) -> str:
    if err is None:
        return "completed"
    return "pruned" if type(err).__name__ == "TrialPruned" else "failed"


def write_json(path: Path, data: dict) -> None:
    write_atomically(path, json.dumps(data, indent=2, default=str))


class SweepSummary(Callback):
    """Writes the summary of a multirun into its sweep dir (rank 0, multirun mode only)."""

    def __init__(
        self,
        replica_keys=("seed", "fold"),
        plot: bool = True,
        fail_fast: bool = False,
        report: bool = True,
        **unknown,
    ):
        # overrides whose last key part is in `replica_keys` tell replicas apart (seeds, folds);
        # fail_fast is read by the grid sweeper (litlab.sweeps.grid). Kept as given: the run
        # dir guard checks them (config.entries.SweepSummarySettings) when the sweep starts, in one line
        # with what is valid, which a failure here (Hydra builds callbacks first) could not say
        self.replica_keys, self.fail_fast, self.plot = replica_keys, fail_fast, plot
        self.report = report
        self._started: dict[str, float] = {}
        self._done = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if is_rank_zero():
            plan.announce(config)  # the sweep dir and the command that resumes the sweep
            atexit.register(self._finish, config, True)  # a stop skips on_multirun_end

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._finish(config):
            raise SystemExit(1)  # a failed job or trial (after the summary and report)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if _is_multirun(config):
            out = Path(config.hydra.runtime.output_dir)
            self._started[str(out)] = time.time()
            write_json(out / sweep_records.RECORD, self._record(config, status="running"))

    def on_job_end(self, config: DictConfig, job_return, **kwargs: Any) -> None:
        if not _is_multirun(config):
            return
        out = Path(config.hydra.runtime.output_dir)
        outcome = job_outcome(job_return)
        err = None if job_return.status.name == "COMPLETED" else outcome
        value = outcome if err is None else None
        record = self._record(
            config,
            status=status_of(err),
            objective=value,
            error=one_line(err, with_type=True, limit=300) if err is not None else "",
        )
        record["wall_s"] = round(time.time() - self._started.pop(str(out), time.time()), 2)
        metrics_file = out / "metrics.json"
        if metrics_file.is_file():
            record["metrics"] = json.loads(metrics_file.read_text())
        write_json(out / sweep_records.RECORD, record)

    def _record(self, config: DictConfig, **fields) -> dict:
        return {
            "job": int(_select(config, "hydra.job.num", 0)),
            "overrides": list(_select(config, "hydra.overrides.task", [])),
            "objective_name": _select(config, "optimized_metric"),
            "mode": job_objective_mode(config),
            "run_dir": str(config.hydra.runtime.output_dir),
            "started": time.time(),
            "metrics": {},
            "objective": None,
            "error": "",
            "wall_s": None,
            **fields,
        }

    def _finish(self, config: DictConfig, stopped: bool = False) -> bool:
        if self._done or not is_rank_zero():
            return False
        self._done = True
        sweep_dir = Path(str(_select(config, "hydra.sweep.dir")))
        records = plan.with_not_started(sweep_dir, load_records(sweep_dir))
        if records:
            write_summary(sweep_dir, records, tuple(self.replica_keys), self.plot)
            if self.report:
                from litlab.report import write_quietly  # report.html (a failure: a warning)

                write_quietly(sweep_dir)
        return plan.end(sweep_dir, records, stopped, config)


def load_records(sweep_dir: Path) -> list[dict]:
    """Every job record under `sweep_dir` (`sweep_records.read_record`: a file that is no record
    counts as a job that left none). Each names its run dir where the record is now: a sweep
    dir moved elsewhere (and resumed there) names its jobs' folders, not where they were."""
    records = []
    for path in sweep_dir.rglob(sweep_records.RECORD):
        try:
            record = sweep_records.read_record(path)
        except sweep_records.NotAFile:
            continue
        if record is not None:
            record["run_dir"] = os.path.abspath(path.parent)
            if record["status"] == "running":  # now: killed (or runs in another worker)
                record["status"] = "incomplete"
            records.append(record)
    return sorted(records, key=lambda r: (r["job"], r["run_dir"]))


def metric_column(metric: str) -> str:
    """Column of a final logged value: train/val/test metrics keep their names; anything else
    (e.g. LearningRateMonitor's `lr-AdamW`, the last learning rate of the schedule) is
    `logged/<name>`, so that nobody reads it as the job's setting."""
    return metric if metric.startswith(("train/", "val/", "test/")) else f"logged/{metric}"


def _varying(records: list[dict]) -> tuple[list[str], list[str]]:
    """(overrides shared by every job, per-job text of the overrides that differ)."""
    common = files.common_overrides(records)
    shared = [o for o in records[0]["overrides"] if o in common]
    return shared, [" ".join(o for o in r["overrides"] if o not in common) for r in records]


def write_summary(
    sweep_dir: Path, records: list[dict], replica_keys=("seed", "fold"), plot: bool = True
) -> list[dict]:
    """Write summary.csv/.md/.png and summary_stats.csv into `sweep_dir`, print the table."""
    groups = replica_groups(records, replica_keys)
    objective = next((r["objective_name"] for r in records if r["objective_name"]), "objective")
    every_metric = sorted({k for r in records for k in r["metrics"]})
    shown = [m for m in every_metric if m.startswith(("val/", "test/"))]
    # each replica group's statistics and its difference with the best group, on the
    # objective and the val/test metrics
    mode = next((r["mode"] for r in records if r["status"] == "completed"), "max")
    metrics = list(dict.fromkeys([objective, *shown]))
    stats = summary_stats.compute(records, groups, metrics, objective, mode)
    best = marked_best(records, groups, stats["best_group"], files.best_job(records))
    shared, varying = _varying(records)
    settings = [files.settings_of(r["overrides"]) for r in records]
    keys = list(dict.fromkeys(k for job in settings for k in job))  # in the order first given
    rows = [
        {
            "job": r["job"],
            "best": "*" if i in best else "",
            "status": r["status"],
            "objective": r["objective"],
            **{k: settings[i].get(k, "") for k in keys},
            **{metric_column(m): r["metrics"].get(m) for m in every_metric},
            "wall_s": None if r["wall_s"] is None else f"{r['wall_s']:.1f}",
            "overrides": " ".join(r["overrides"]),
            "varying": varying[i],
            "run_dir": r["run_dir"],
            "error": r["error"],
        }
        for i, r in enumerate(records)
    ]
    header = [column for column in rows[0] if column != "varying"]  # varying: summary.md's
    with open(sweep_dir / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    summary_stats.write_stats(sweep_dir, stats)
    table = markdown(
        rows, ["job", "best", "status", "objective", *shown, "wall_s", "varying", "error"]
    )
    marked = "jobs of the best group marked *" if stats["best_group"] else "best job marked *"
    common = " ".join(shared) or "(none)"
    head = f"objective: {objective} ({marked}); overrides of every job: {common}"
    text = [f"# Sweep summary: {sweep_dir}", head, table, summary_stats.text(stats, heading="## ")]
    (sweep_dir / "summary.md").write_text("\n\n".join(text) + "\n")
    if plot:
        plot_summary(records, best, stats, sweep_dir / "summary.png")
    failed = sum(r["status"] in ("failed", "incomplete") for r in records)
    print(
        f"\nSweep summary ({len(records)} jobs, {failed} failed or incomplete): "
        f"{sweep_dir / 'summary.md'}\n{head}\n{table}\n\n"
        f"{summary_stats.text(stats, heading='')}",
        flush=True,
    )
    return rows
