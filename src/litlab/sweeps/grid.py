"""The grid sweep (`hydra/sweeper=basic`, litlab's version of Hydra's basic sweeper): the same
jobs in the same order and job numbers, plus what a long sweep needs.

- **Resume.** The same command with `hydra.sweep.dir=<dir>` (printed when every sweep starts)
  runs only what is missing: a job whose record (`sweep_job.json`) says completed is kept and
  not launched; any other job that ran before runs again in its own run dir, from its own
  `last.ckpt` when it has one (`_again`), so its metrics.csv goes on instead of starting over.
  A command with other settings is refused before this runs (`litlab.runs.sweep_dir`).
- **Every job, whatever fails.** A failed job does not raise here (Hydra's basic sweeper
  re-raises the first one and skips `on_multirun_end`): the sweep goes on, and the summary
  callback ends it with one line per failed job and exit code 1. With
  `hydra.callbacks.sweep_summary.fail_fast=true` it launches no job after the first failure.
- **Stops.** SIGTERM between two jobs' training lets the current job finish, then stops the
  sweep (exit 143); during training the job's own handler saves last.ckpt and stops it.

Skipping and resuming happen here, not in a launcher: jobs are launched in runs of consecutive
job numbers (`initial_job_idx`), so any launcher names their dirs as it would have.

What litlab's sweepers share with every Hydra sweeper: keep the context and build the
configured launcher (`hydra/launcher=...`) once the sweep's config is known. Imported by
Hydra's plugin scan for every command: only light modules here (Hydra's, and litlab's sweep
summary, which Hydra builds as a callback for every run anyway)."""

import signal
import time
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from litlab.compat.hydra import grid_jobs, job_outcome
from litlab.errors import one_line
from litlab.report.files import settings_of
from litlab.sweeps.plan import MACHINE_LOCAL
from litlab.sweeps.summary import job_objective_mode, load_records, write_json
from litlab.utils import sweep_records

SWEEP_RESUME = "LITLAB_SWEEP_RESUME"  # a job that continues its run dir's last.ckpt
EXIT_SIGTERM = 128 + signal.SIGTERM


def grid(config, loader, arguments: list[str]) -> list[list[str]]:
    """Every job's overrides, in Hydra's basic sweeper's order (`hydra.sweeper.params` first)."""
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    given = [f"{k}={v}" for k, v in params.items()] + list(arguments)
    return grid_jobs(OverridesParser.create(config_loader=loader).parse_overrides(given))


def _same(record: dict, job: list[str]) -> bool:
    return settings_key(record.get("overrides", [])) == settings_key(job)


def _again(config, ran_before: bool) -> list[str]:
    """Hydra overrides of a job launched again. Every such job may continue the last.ckpt of
    its run dir (`resume.swept_checkpoint` takes it when there is one: so a job whose record
    was lost or damaged still resumes instead of training over its checkpoints); one that ran
    before keeps its first .hydra/."""
    extra = [f"++hydra.job.env_set.{SWEEP_RESUME}=1"]
    if ran_before and OmegaConf.select(config, "hydra.output_subdir", default=None) is not None:
        extra.append(f"hydra.output_subdir=.hydra/resume-{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    return extra


def _runs(todo: list[tuple[int, list[str]]], size: int) -> list[list[tuple[int, list[str]]]]:
    """`todo` cut into launches of consecutive job numbers, at most `size` jobs each."""
    launches: list[list[tuple[int, list[str]]]] = []
    for num, job in todo:
        last = launches[-1] if launches else None
        if last and last[-1][0] == num - 1 and len(last) < size:
            last.append((num, job))
        else:
            launches.append([(num, job)])
    return launches


class _StopBetweenJobs:
    """SIGTERM outside a job's training: finish that job, then stop (Python's default would end
    the process at once, leaving no summary)."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._previous = signal.signal(signal.SIGTERM, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.requested = True
        print("SIGTERM: the sweep stops after this job", flush=True)

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _batch_size(sweeper, fail_fast: bool, count: int) -> int:
    size = OmegaConf.select(sweeper.config, "hydra.sweeper.max_batch_size", default=None)
    size = count if size in (None, -1) else int(size)
    if fail_fast and type(sweeper.launcher).__name__ == "BasicLauncher":
        return 1  # in-process jobs: one at a time, so that none starts after a failure
    return max(1, size)


def overrides_of(run_dir: Path) -> list[str] | None:
    """A run dir's `.hydra/overrides.yaml`, read as data (a list of strings; a regular file of
    at most 1 MiB), or None."""
    try:
        overrides = yaml.safe_load(
            sweep_records.read_bytes(run_dir / ".hydra" / "overrides.yaml") or b""
        )
    except (sweep_records.NotAFile, OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if isinstance(overrides, list) and all(isinstance(o, str) for o in overrides):
        return overrides
    return None


def settings_key(overrides: list[str]) -> tuple:
    return tuple(sorted(settings_of(overrides, skip=MACHINE_LOCAL).items()))


def _run_dirs(sweep_dir: Path) -> dict:
    """The sweep's run dirs by the settings their `.hydra/overrides.yaml` holds (read once a
    resume; a dir without one is under None)."""
    dirs = {}
    for run_dir in sorted(p for p in sweep_dir.iterdir() if p.is_dir()):
        overrides = overrides_of(run_dir)
        key = None if overrides is None else settings_key(overrides)
        dirs.setdefault(key, []).append(run_dir)
    return dirs


def _job_dir(sweep_dir: Path, num: int, job: list[str], run_dirs: dict) -> Path:
    """Job `num`'s run dir: `<sweep dir>/<num>` (`hydra.sweep.subdir`'s default) unless its
    `.hydra/overrides.yaml` names another job; else the folder whose overrides are this job's
    (a sweep with another `hydra.sweep.subdir`, e.g. `${hydra.job.override_dirname}`)."""
    mine = run_dirs.get(settings_key(job), [])
    default = sweep_dir / str(num)
    if default in mine or default in run_dirs.get(None, []):
        return default
    return mine[0] if mine else default


def _finished_without_record(
    config, sweep_dir: Path, num: int, job: list[str], run_dirs: dict
) -> dict | None:
    """A job that finished (its run dir holds metrics.json) but whose record is missing or
    damaged: its record is written again from its metrics, so that it is kept, not trained
    over its own checkpoints. None for any other job."""
    out = _job_dir(sweep_dir, num, job, run_dirs)
    try:
        metrics = sweep_records.read_json(out / sweep_records.FINISHED)
    except sweep_records.NotAFile:
        return None
    if not isinstance(metrics, dict):
        return None
    name = OmegaConf.select(config, "optimized_metric", default=None)
    record = sweep_records.checked_record(
        {
            "job": num,
            "status": "completed",
            "overrides": [str(o) for o in job],
            "objective_name": name,
            "mode": job_objective_mode(config),
            "run_dir": str(out),
            "metrics": metrics,
            "objective": metrics.get(name) if isinstance(name, str) else None,
        }
    )
    write_json(out / sweep_records.RECORD, record)
    return record


def pending(config, sweep_dir: Path, jobs: list[list[str]]) -> tuple[list, list[int]]:
    """(jobs to launch with their numbers, numbers of completed jobs kept)."""
    records = {int(r["job"]): r for r in load_records(sweep_dir)}
    run_dirs = _run_dirs(sweep_dir) if sweep_dir.is_dir() else {}
    todo, kept = [], []
    for num, job in enumerate(jobs):
        record = records.get(num) or _finished_without_record(config, sweep_dir, num, job, run_dirs)
        if record is not None and record["status"] == "completed" and _same(record, job):
            kept.append(num)
        else:
            ran_before = record is not None or _job_dir(sweep_dir, num, job, run_dirs).exists()
            todo.append((num, [*job, *_again(config, ran_before)]))
    return todo, kept


def record_deaths(sweep_dir: Path, first: int, results) -> None:
    """A job whose process died (killed, out of memory) left its record `running`: the
    launcher's failed JobReturn says how it ended, and the record says so too, so that the
    summary lists it as failed, with that line, and the sweep exits non-zero. (A job stopped
    with the sweep never gets here: the launcher's stop ends the sweep first.)"""
    failed = {first + i: r for i, r in enumerate(results) if r.status.name == "FAILED"}
    if not failed:
        return
    for record in load_records(sweep_dir):  # a record left `running` is read as incomplete
        if record["job"] in failed and record["status"] == "incomplete":
            error = job_outcome(failed[record["job"]])
            record.update(status="failed", error=one_line(error, with_type=True, limit=300))
            write_json(Path(record["run_dir"]) / sweep_records.RECORD, record)


#: the overrides of every job that `runs.sweep_dir.check_jobs` composed and validated before the
#: sweep started: Hydra's sweeper would compose each again before its launch only to see that
#: it composes (~0.2 s a job); `run_grid` takes the set once and checks only the jobs outside it
CHECKED: set[tuple[str, ...]] = set()


def run_grid(sweeper, arguments: list[str]) -> list:
    """Launch the jobs of the grid that are not completed yet (see the module docstring)."""
    config = sweeper.config
    jobs = grid(config, sweeper.hydra_context.config_loader, arguments)
    sweep_dir = Path(str(config.hydra.sweep.dir))  # made and marked by runs.sweep_dir
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if not (sweep_dir / "multirun.yaml").is_file():  # a resume keeps the first one
        OmegaConf.save(config, sweep_dir / "multirun.yaml")
    todo, kept = pending(config, sweep_dir, jobs)
    if kept:
        print(
            f"resuming the sweep: {len(kept)} of {len(jobs)} jobs completed before and are kept "
            f"(jobs {', '.join(map(str, kept))}); running {len(todo)}",
            flush=True,
        )
    fail_fast = bool(OmegaConf.select(config, "hydra.callbacks.sweep_summary.fail_fast"))
    checked = set(CHECKED)  # composed and validated before the sweep started
    CHECKED.clear()  # for this sweep only
    returns = []
    with _StopBetweenJobs() as stop:
        for launch in _runs(todo, _batch_size(sweeper, fail_fast, len(todo))):
            batch = [job for _, job in launch]
            # a job is composed again only if its own overrides were not (`_again` adds
            # hydra.* overrides to them, which change no other node)
            sweeper.validate_batch_is_legal(
                [job for num, job in launch if tuple(jobs[num]) not in checked]
            )
            results = sweeper.launcher.launch(batch, initial_job_idx=launch[0][0])
            returns.append(results)
            record_deaths(sweep_dir, launch[0][0], results)
            if stop.requested:
                raise SystemExit(EXIT_SIGTERM)
            if fail_fast and any(r.status.name != "COMPLETED" for r in results):
                print("fail_fast: a job failed, no further job is started", flush=True)
                break
    return returns


# ------------------------------------------------------------- launching
class LaunchingSweeper(Sweeper):
    config: DictConfig | None = None
    launcher = None
    hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        from litlab import console  # logging and re only

        console.launch_lines(self.launcher)  # its lines without litlab's environment overrides
