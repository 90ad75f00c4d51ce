"""A sweep writes only into a folder of its own, one sweep at a time, and every job of it is
checked before the first one starts.

`hydra.sweep.dir` is claimed when a sweep starts (`run_dir.Guard.on_multirun_start`), before
Hydra's sweeper writes anything in it. It is **locked** (`SweepLock`, shared only by the
workers of one Optuna study), **owned** (`check_owned`: new, or made by a litlab sweep of this
entry point and kind whose every entry is its own, so the user's files are never written
over), holds **nothing through a link** (a resumed job would write there), is **the same
sweep** on a resume (`sweeps.plan.check_resume`), and **every job is valid** (`check_jobs`: a
bad value in the third job of `-m seed=1,2,-5` costs one line naming that job, not two trained
jobs and a failed third). Each job is composed as its launcher will compose it (a search: its
fixed overrides with each queued trial and its space at its edges) and checked as its entry
point checks it; what needs no import is judged for every job first, so `-m seed=1,-5` is
refused in a second. The launcher's settings (`check_launcher`) are checked before all that.

Nothing is written until the last step: `claim` locks the folder, checks it again under the
lock (a sweep started meanwhile) and writes the plan. A refusal leaves the folder as it was
(`give_up`)."""

import copy
import os
import re
import stat
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from litlab import threads
from litlab.checkpointing.run_lock import RunLock
from litlab.compat.hydra import BASIC_SWEEPER as BASIC  # hydra/sweeper=basic's own
from litlab.config import validate
from litlab.config.resolvers import certainly_no_gpu
from litlab.errors import UserError
from litlab.sweeps import optuna_search, parallel_slots, plan
from litlab.sweeps.grid import CHECKED, grid, overrides_of, settings_key
from litlab.sweeps.summary import load_records
from litlab.utils import code_state as snapshot
from litlab.utils import commands, sweep_records

LOCK = Path(".sweep.lock")
SWEEP_FILES = frozenset(
    {plan.PLAN, str(LOCK), "multirun.yaml", "report.html", "summary_stats.json"}
    | {f"summary{ext}" for ext in (".csv", ".md", ".png")}
    | {"summary_stats.csv", "best_params.yaml", "optimization_history.png"}
    | {f"optuna.db{ext}" for ext in ("", "-journal", "-wal", "-shm")}  # and SQLite's own files
)
# the code snapshot; submitit's job files
LAUNCHER_DIRS = frozenset({snapshot.SNAPSHOTS, ".submitit"})
TEMP = re.compile(r"\.[\w.-]+\.\d+\.tmp")  # a write cut short (`.summary.csv.<pid>.tmp`)
_held: dict[str, "SweepDir"] = {}  # sweep dir -> the claim this process holds on it


class SweepLock(RunLock):
    """One sweep per sweep dir (the workers of one Optuna study together: `shared`)."""

    file = LOCK

    def __init__(self, sweep_dir, note: str = "", shared: bool = False):
        super().__init__(sweep_dir, note=note)
        self.shared = shared

    def refusal(self, who: str) -> UserError:
        try:  # the lock file is data: the command in it is shown only when it is sound
            what = f" ({commands.printable(self.holder_note(), multirun=True)})"
        except commands.Untrusted:
            what = ""
        return UserError(
            f"hydra.sweep.dir={self.run_dir} is in use by another sweep: {who}{what}; wait for "
            f"it to end or stop it, then run this command again (a dead process's lock is "
            f"taken over)"
        )


def sweep_type(config: DictConfig) -> str:
    target = (OmegaConf.select(config, "hydra.sweeper", default=None) or {}).get("_target_")
    return {BASIC: plan.GRID, GRID: plan.GRID, OPTUNA: plan.SEARCH}.get(target, plan.OTHER)


def _describe(kind: str, entry: str, study) -> str:
    what = {plan.GRID: "a grid sweep", plan.SEARCH: f"an Optuna search (study {study})"}
    return f"{what.get(kind, 'a sweep')} of src/{entry}.py"


def _only_logs(folder: Path, entries: list[str]) -> bool:
    """A job that started and wrote nothing but its logs yet (a launcher's `console.log`)."""
    return all(e.endswith(".log") and (folder / e).is_file() for e in entries)


def _own_job(folder: Path, jobs: set | None, depth: int = 0) -> bool:
    """Whether `folder` holds nothing (or only logs), or one of the sweep's jobs (its record
    or its `.hydra/overrides.yaml`: settings in `jobs`, any job when None), or only such
    folders (a `hydra.sweep.subdir` with a `/`)."""
    entries = os.listdir(folder)
    if _only_logs(folder, entries):
        return True
    try:
        record = sweep_records.read_record(folder / sweep_records.RECORD)
    except sweep_records.NotAFile:
        raise UserError(f"{folder / sweep_records.RECORD} is not a regular file") from None
    overrides = record["overrides"] if record is not None else overrides_of(folder)
    if jobs is None and (overrides is not None or (folder / ".hydra").is_dir()):
        return True  # a search's trial (maybe another worker's, being written now)
    if overrides is not None:
        return settings_key(overrides) in jobs
    subdirs = [folder / e for e in entries]
    if depth >= 3 or not all(p.is_dir() and not p.is_symlink() for p in subdirs):
        return False
    return all(_own_job(p, jobs, depth + 1) for p in subdirs)


def _check_entry(path: Path, jobs: set | None) -> str | None:
    """What is wrong with one entry at the top of a litlab sweep's folder, or None (`jobs`:
    the settings of the plan's jobs; None: a search's, any job)."""
    from litlab.checkpointing.atomic_io import links_out

    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link to {os.readlink(path)}"
    if path.name in SWEEP_FILES or TEMP.fullmatch(path.name):
        if not stat.S_ISREG(st.st_mode):
            return f"{path} is not a regular file"
        return f"{path} is a hard link to a file elsewhere" if st.st_nlink > 1 else None
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is a file that no litlab sweep writes"
    if path.name not in LAUNCHER_DIRS and not _own_job(path, jobs):
        return f"{path} is not a folder of one of this sweep's jobs"
    found = links_out(path)
    if found is not None:
        link, target = found
        where = f"a symbolic link to {target}" if target else "a hard link to a file elsewhere"
        return f"{link} is {where}, outside its folder"
    if path.name == snapshot.SNAPSHOTS:  # code its jobs will import: as litlab wrote it
        snapshot.check_folder(path)
    return None


def _check_path(sweep_dir: Path) -> None:
    """The sweep dir is a folder of its own, or none yet: never a link, never a file."""
    if sweep_dir.is_symlink():
        raise UserError(
            f"hydra.sweep.dir={sweep_dir} is a symbolic link to {os.readlink(sweep_dir)}: a "
            f"sweep writes nothing through a link; give the folder's own path"
        )
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise UserError(f"hydra.sweep.dir={sweep_dir} is a file, not a folder; {plan.NEW_FOLDER}")


def check_owned(sweep_dir: Path, kind: str, entry: str, study=None) -> dict | None:
    """One `UserError` unless `sweep_dir` is new, or a litlab sweep's of this kind whose every
    entry is its own (`SWEEP_FILES`, `LAUNCHER_DIRS`, its jobs' folders, none a link or holding
    a link out); its plan (None: a new folder)."""
    _check_path(sweep_dir)
    entries = sorted(os.listdir(sweep_dir)) if sweep_dir.is_dir() else []
    if not [e for e in entries if e != str(LOCK)]:
        return None  # new (the lock: this sweep's own, taken a moment ago)
    own = plan.read_plan(sweep_dir)
    if own is None:
        theirs = [e for e in entries if e != str(LOCK)]
        shown = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
        raise UserError(
            f"hydra.sweep.dir={sweep_dir} holds files that no litlab sweep wrote ({shown}; no "
            f"{plan.PLAN}): a sweep writes only into a new folder or one that a litlab sweep "
            f"made, and never over the files of another; {plan.NEW_FOLDER}"
        )
    theirs = _describe(own["kind"], own["entry"], own.get("study"))
    mine = _describe(kind, entry, study)
    if theirs != mine:
        raise UserError(
            f"hydra.sweep.dir={sweep_dir} holds {theirs} (its {plan.PLAN}), not {mine}; "
            f"{plan.NEW_FOLDER}"
        )
    jobs = None if own.get("jobs") is None else {settings_key(j) for j in own["jobs"]}
    for name in entries:
        why = _check_entry(sweep_dir / name, jobs)
        if why is not None:
            raise UserError(
                f"hydra.sweep.dir={sweep_dir}: {why}; litlab writes into a sweep's folder only "
                f"what is its own, never through a link: move it away, or {plan.NEW_FOLDER}"
            )
    return own


class SweepDir:
    """This process's claim on its sweep dir: `check` (read only, before the jobs are checked),
    then `claim` (locked, checked again, marked), or `give_up` (see the module docstring)."""

    def __init__(self, config: DictConfig, entry: str):
        self.config, self.entry = config, entry
        self.lock: SweepLock | None = None  # set by `check` (which may refuse in one line)
        self.jobs: list[list[str]] | None = None
        self._made: list[Path] = []  # folders made for the lock, outermost first
        self._made_lock = False

    def _read_config(self) -> None:
        config = self.config
        self.kind = sweep_type(config)
        self.path = Path(os.path.abspath(str(OmegaConf.select(config, "hydra.sweep.dir"))))
        search = self.kind == plan.SEARCH
        self.study = OmegaConf.select(config, "hydra.sweeper.study_name") if search else None
        self.command = plan.sweep_resume_command(config)
        self.lock = SweepLock(self.path, note=self.command, shared=search)

    def check(self) -> None:
        """Read only: no sweep runs in the folder now, it is this sweep's (`check_owned`), and
        a resume is the same sweep."""
        if self.lock is None:
            self._read_config()
        self.lock.probe()  # a sweep running in it now: named at once, before the jobs' checks
        own = check_owned(self.path, self.kind, self.entry, self.study)
        if self.kind == plan.SEARCH:  # the study's database: one it may write, before the folder
            validate.check_search(self.config)  # n_trials, timeout, direction, ...
            sweeper = OmegaConf.to_container(self.config.hydra.sweeper, resolve=True)
            arguments = [str(o) for o in self.config.hydra.overrides.task]
            optuna_search.search_settings(sweeper, arguments)  # a search space, a direction
            optuna_search.check_components(sweeper)  # its sampler and pruner build
            url = OmegaConf.select(self.config, "hydra.sweeper.storage", default=None)
            optuna_search.check_sqlite(str(url or f"sqlite:///{self.path / 'optuna.db'}"))
        if self.kind == plan.GRID:
            self.jobs = grid_overrides(self.config)
            if own is not None and self.jobs is not None:
                plan.check_resume(self.path, self.jobs, load_records(self.path))

    def claim(self) -> None:
        """Lock the folder (made if new), check it again under the lock (another sweep may
        have started since `check`), and write the plan: the folder is this sweep's now."""
        _check_path(self.path)
        missing = [p for p in (self.path, *self.path.parents) if not os.path.lexists(p)]
        for folder in reversed(missing):
            folder.mkdir()
            self._made.append(folder)
        self._made_lock = not os.path.lexists(self.path / LOCK)
        self.lock.acquire()
        self.check()
        if self.kind == plan.SEARCH:  # a study that cannot be resumed: refused before the plan
            sweeper = OmegaConf.to_container(self.config.hydra.sweeper, resolve=True)
            arguments = [str(o) for o in self.config.hydra.overrides.task]
            optuna_search.check_resumable(sweeper, arguments, self.path)
        plan.write_plan(self.path, self.jobs, self.command, self.entry, self.kind, self.study)
        _held[str(self.path)] = self

    def give_up(self) -> None:
        """After a refusal: unlocked, and the folder as it was before `claim`."""
        if self.lock is None:
            return
        self.lock.release()
        if self._made_lock:
            (self.path / LOCK).unlink(missing_ok=True)
        for folder in reversed(self._made):
            try:
                folder.rmdir()
            except OSError:  # not empty: something else is in it now
                break


def release(config: DictConfig) -> None:
    """The sweep ended: its folder is unlocked (a stop or a crash: the OS unlocks it)."""
    held = _held.pop(os.path.abspath(str(OmegaConf.select(config, "hydra.sweep.dir"))), None)
    if held is not None:
        held.lock.release()


# ----------------------------------------------------------- sweep check
GRID = "hydra_plugins.litlab_grid_sweeper.grid_sweeper.LitlabGridSweeper"  # hydra/sweeper=basic
OPTUNA = "hydra_plugins.litlab_optuna_sweeper.optuna_sweeper.LitlabOptunaSweeper"


def jobs(config: DictConfig, loader) -> list[tuple[str, list[str]]]:
    """(what the job is, its overrides) for each job the sweeper knows up front (else none)."""
    sweeper = OmegaConf.select(config, "hydra.sweeper", default=None) or {}
    arguments = [str(o) for o in config.hydra.overrides.task]
    kind = sweep_type(config)
    if kind == plan.GRID:
        return [
            (f"job {i} of the sweep", job) for i, job in enumerate(grid(config, loader, arguments))
        ]
    if kind == plan.SEARCH:
        return _search_jobs(OmegaConf.to_container(sweeper, resolve=False), arguments)
    return []


def _search_jobs(options: dict, arguments: list[str]) -> list[tuple[str, list[str]]]:
    """An Optuna search: its fixed overrides with each trial queued up front, and with every
    dimension of the space at its edges (low, high; each choice of a categorical one)."""
    space, fixed = optuna_search.build_space(options.get("params"), arguments)
    value = optuna_search.as_override_value
    queued = [  # Optuna uses a queued value only for a dimension of the space
        (f"queued trial {i} of the search", fixed + [f"{k}={value(t[k])}" for k in space if k in t])
        for i, t in enumerate(options.get("enqueue_trials") or [])
    ]
    edges = [list(getattr(d, "choices", None) or (d.low, d.high)) for d in space.values()]
    corners = [
        (
            "the search space's edge",
            fixed + [f"{k}={value(e[min(i, len(e) - 1)])}" for k, e in zip(space, edges)],
        )
        for i in range(max((len(e) for e in edges), default=1))
    ]
    return queued + corners


def _varying(all_jobs: list[tuple[str, list[str]]], job: list[str]) -> list[str]:
    """The overrides of `job` that differ between jobs (else all of them): what names it."""
    sets = [set(overrides) for _, overrides in all_jobs]
    shared = set.intersection(*sets) if len(sets) > 1 else set()
    return [o for o in job if o not in shared] or job


def _compose_job(loader, config: DictConfig, overrides: list[str], num: int) -> DictConfig:
    """The job's config as the launcher composes it (its `hydra` node included)."""
    job = loader.load_sweep_config(config, list(overrides))
    with read_write(job.hydra), open_dict(job.hydra):
        job.hydra.job.num, job.hydra.job.id = num, f"{num}"
        subdir = OmegaConf.select(job, "hydra.sweep.subdir", default=None)
        job.hydra.runtime.output_dir = f"{job.hydra.sweep.dir}/{subdir}"
    return job


def _as_task(job: DictConfig) -> DictConfig:
    """A copy of the job's config as the task sees it (without `hydra`), its `hydra` node
    registered as the current HydraConfig (the caller restores the sweep's)."""
    HydraConfig.instance().set_config(job)
    task = copy.deepcopy(job)  # its flags (struct, readonly) kept
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


#: jobs whose composed config (~0.2 MB each) the first pass keeps for the second; a sweep of
#: more composes the others again rather than hold thousands of configs
KEPT_JOBS = 256


def check_jobs(config: DictConfig, config_name: str) -> None:
    """Compose and validate every job of the sweep; one `UserError` naming the bad job: the
    first that fails what needs no import, else the first that fails the rest."""
    from litlab.config import validate

    CHECKED.clear()
    loader = GlobalHydra.instance().config_loader()
    try:
        all_jobs = jobs(config, loader)
    except UserError:
        raise
    except Exception:  # noqa: BLE001  (overrides the sweeper cannot split: it says so itself)
        return
    sweep = HydraConfig.instance().cfg
    kept: dict[int, DictConfig] = {}  # composed in the first pass, for the second
    try:
        for imports in (False, True):
            for num, (what, overrides) in enumerate(all_jobs):
                name = f"{what} ({' '.join(_varying(all_jobs, overrides))})"
                try:
                    job = kept.pop(num, None)
                    if job is None:
                        job = _compose_job(loader, config, overrides, num)
                    if not imports and num < KEPT_JOBS:
                        kept[num] = job
                    validate.check(_as_task(job), config_name, imports=imports)
                except UserError as err:
                    raise UserError(f"{name}: {err}") from None
                except Exception as err:  # noqa: BLE001  (composition: Hydra's multi-line text)
                    from litlab.config.compose import condense

                    raise UserError(f"{name}: {condense(str(err))}") from None
        CHECKED.update(tuple(overrides) for _, overrides in all_jobs)
    finally:
        HydraConfig.instance().cfg = sweep


def grid_overrides(config: DictConfig) -> list[list[str]] | None:
    """Every job's overrides of a grid sweep (None: overrides the sweeper cannot split, which
    it says itself when it starts)."""
    try:
        return [overrides for _, overrides in jobs(config, GlobalHydra.instance().config_loader())]
    except Exception:  # noqa: BLE001  (overrides the sweeper cannot split: it says so itself)
        return None


# -------------------------------------------------------- launcher check
PARALLEL = "hydra_plugins.litlab_launchers.parallel.ParallelLauncher"


def machine_gpus() -> list[str]:
    """The GPUs this process may hand out (no torch import on a machine without any)."""
    if certainly_no_gpu():
        return []
    import torch

    count = torch.cuda.device_count()
    return parallel_slots.visible_gpus(count, os.environ.get("CUDA_VISIBLE_DEVICES"))


def slots(launcher: DictConfig, free_cores: int | None = None) -> list:
    """The launcher's slots on this machine (the cores split between them: `free_cores`, or
    those other jobs leave free now), or a UserError naming what is valid."""
    n_jobs, gpus_per_job = launcher.get("n_jobs", 2), launcher.get("gpus_per_job", "auto")
    cores = threads.free_cores() if free_cores is None else free_cores
    return parallel_slots.plan(n_jobs, gpus_per_job, machine_gpus(), cores)


def check_launcher(config: DictConfig) -> None:
    launcher = OmegaConf.select(config, "hydra.launcher", default=None)
    if launcher is not None and launcher.get("_target_") == PARALLEL:
        # the cores decide no refusal: the launcher's setup looks at the machine once, later
        slots(launcher, free_cores=1)
