"""The run dir as Hydra makes it for a CLI run, made the same way for an in-process run
(`litlab.train([...])`), and removed again when bad input stopped the run before it wrote
anything (both routes: no half-written run dir).

Before it is made (`Guard`, a Hydra callback of configs/hydra/default.yaml, and `start`): it
must lie below `paths.log_dir` (task_name is a plain folder name; hydra.run.dir, the sweep dir
and `hydra.output_subdir` resolve inside), or the command stops in one line, exit 2, with
nothing created; a train or compress run holds its dir's `RunLock` while it runs, so a second
process resuming the same dir is refused naming the PID that holds it."""

import copy
import logging
import os
import re
import shutil
import sys
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from litlab.checkpointing.resume import RESUMABLE_CONFIGS
from litlab.checkpointing.run_lock import LOCK_FILE, RunLock
from litlab.errors import UserError, one_line, refusal_behind
from litlab.utils.distributed import is_rank_zero

PLAIN_NAME = re.compile(r"[\w.-]+")
_held: dict[str, object] = {}  # run dir -> the RunLock this process holds on it
_STARTED = time.time() - 1  # the CLI imports this module before Hydra writes anything


def _inside(path, folder) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


def check_location(cfg: DictConfig, multirun: bool = False) -> None:
    """One line unless every folder this run writes lies below `paths.log_dir` (`~paths`
    deleted it: named as the required node it is)."""
    from litlab.config import rules

    rules.check_required(cfg, "entry")
    name = str(cfg.get("task_name"))
    if not PLAIN_NAME.fullmatch(name) or name in (".", ".."):
        raise UserError(
            f"task_name={name} must be a plain folder name (letters, digits, '_', '-', '.'): "
            f"runs are written to <paths.log_dir>/<task_name>/"
        )
    log_dir = str(OmegaConf.select(cfg, "paths.log_dir"))
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    out = str(OmegaConf.select(cfg, key))
    if not _inside(out, log_dir):
        raise UserError(
            f"{key}={out} is outside paths.log_dir={log_dir}: every run writes below "
            f"paths.log_dir (set paths.log_dir to write elsewhere)"
        )
    subdirs = [("hydra.output_subdir", OmegaConf.select(cfg, "hydra.output_subdir"))]
    if multirun:  # resolved as for the first job; the parts that differ per job below
        subdirs.append(("hydra.sweep.subdir", _as_job(cfg, ["hydra.sweep.subdir"])[0]))
        _check_job_names(cfg)
    for key, sub in subdirs:
        if sub is not None and not _inside(Path(out) / str(sub), out):
            raise UserError(
                f"{key}={sub} leaves the run dir {out}: use a relative folder inside it"
            )
    if not multirun:
        _check_run_files(cfg, out, log_dir)
    if not multirun and Path(out).is_dir():  # a resumed run: nothing through a link out of it
        from litlab.checkpointing.atomic_io import check_links

        _check_own_run(Path(out))
        check_links(Path(out))


#: what marks a folder as a litlab run's (Hydra's record of its config; every run's provenance)
RUN_MARKS = (".hydra", "provenance.json")


def _check_own_run(out: Path) -> None:
    """An existing `hydra.run.dir` is a run's own (a resume, a DDP rank joining rank 0's run)
    or holds nothing yet but a lock or logs; a folder of the user's files is never written
    into (its metrics.json, checkpoints/ would be replaced)."""
    theirs = sorted(e for e in os.listdir(out) if e != ".run.lock" and not e.endswith(".log"))
    if not theirs or any(os.path.lexists(out / mark) for mark in RUN_MARKS):
        return
    RunLock(out).probe()  # a process working in it now is what the refusal names first
    shown = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
    raise UserError(
        f"hydra.run.dir={out} holds files that no litlab run wrote ({shown}; no .hydra/ nor "
        f"provenance.json): a run writes only into a new folder or its own run dir (to resume "
        f"it); give a new hydra.run.dir (or none: a new timestamped one)"
    )


def _check_job_names(cfg: DictConfig) -> None:
    """A sweep's job dirs named after the job's overrides (`hydra.sweep.subdir=
    ${hydra.job.override_dirname}`) stay inside the sweep dir: no override of the sweep may
    carry a `..` path segment then (Hydra makes each job's dir before any callback of the
    job could refuse it, so this is checked for all jobs before the first)."""
    raw = OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir")
    if "override_dirname" not in str(raw):
        return
    for override in OmegaConf.select(cfg, "hydra.overrides.task", default=None) or []:
        value = str(override).split("=", 1)[-1]
        if ".." in value and "/" in value:  # a `..` segment of the joined dir name
            raise UserError(
                f"hydra.sweep.subdir={raw} names each job's dir after its overrides, and "
                f"{override} would put a job's dir outside the sweep dir: drop "
                "override_dirname from the subdir or pass values without '../'"
            )


def _as_job(cfg: DictConfig, keys: list[str], output_dir: str | None = None) -> list:
    """`keys` resolved as in the first job of the run (job number 0, its run dir). The job's
    fields are set on `cfg` itself and put back as they were, and `${hydra:...}` reads `cfg`
    meanwhile: a copy of the whole config (and Hydra's copy of its `hydra` node) was ~19 ms
    of every command's start."""
    fields = [("job", "num", 0), ("job", "id", "0")]
    if output_dir is not None:
        fields.append(("runtime", "output_dir", output_dir))
    hydra, state = HydraConfig.instance(), HydraConfig.instance().cfg
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        nodes = {name: cfg.hydra[name] for name in ("job", "runtime")}
        saved = [
            OmegaConf.to_container(nodes[group], resolve=False).get(name, _ABSENT)
            for group, name, _ in fields
        ]
        done = []  # the fields set so far: only those are put back
        try:
            for (group, name, value), before in zip(fields, saved):
                nodes[group][name] = value
                done.append((group, name, before))
            hydra.cfg = cfg  # what `${hydra:...}` reads
            return [OmegaConf.select(cfg, key, default=None) for key in keys]
        finally:
            hydra.cfg = state
            for group, name, before in reversed(done):
                if before is _ABSENT:
                    del nodes[group][name]
                else:
                    nodes[group][name] = before


_ABSENT = object()  # a field the config did not hold before `_as_job`


def _check_run_files(cfg: DictConfig, out: str, log_dir: str) -> None:
    """paths.output_dir and the job's log files, as they will resolve in the run `out`."""
    handlers = OmegaConf.select(cfg, "hydra.job_logging.handlers", default=None) or {}
    keys = [
        "paths.output_dir",
        *(f"hydra.job_logging.handlers.{name}.filename" for name in handlers),
    ]
    for key, path in zip(keys, _as_job(cfg, keys, out)):
        if path is not None and not _inside(str(path), log_dir):
            raise UserError(
                f"{key}={path} is outside paths.log_dir={log_dir}: every run writes below "
                f"paths.log_dir"
            )


def lock(cfg: DictConfig, config_name: str):
    """The RunLock of a train/compress run's dir (rank 0 holds it for the DDP ranks), else None."""
    if config_name not in RESUMABLE_CONFIGS or not is_rank_zero():
        return None
    out = str(Path(str(OmegaConf.select(cfg, "hydra.run.dir"))).resolve())
    if out not in _held:
        try:
            _held[out] = RunLock(out).acquire()
        except OSError as err:  # as Hydra's own mkdir would fail a moment later
            raise UserError(
                f"cannot create the run dir (check paths.log_dir, LITLAB_LOG_DIR, hydra.run.dir): {one_line(err)}"
            ) from None
    return _held[out]


def release_run_dir(out) -> None:
    held = _held.pop(str(Path(out).resolve()), None)
    if held is not None:
        held.release()


class Guard(Callback):
    """Checks the run dir's location and locks it before Hydra makes it (see the docstring)."""

    def on_run_start(self, config: DictConfig, config_name: str | None = None, **kw) -> None:
        stop_on_error(lambda: (check_location(config), lock(config, str(config_name))))

    def on_multirun_start(self, config: DictConfig, config_name: str | None = None, **kw) -> None:
        """Also the launcher's settings, the sweep dir (its own, locked) and every job of the
        sweep (litlab.runs.sweep_dir), before the sweeper writes anything."""
        from litlab.config import validate
        from litlab.runs import sweep_dir

        stop_on_error(lambda: check_location(config, multirun=True))
        stop_on_error(lambda: sweep_dir.check_launcher(config))  # n_jobs: before the jobs
        stop_on_error(lambda: validate.check_summary(config))  # fail_fast, ...
        owned = sweep_dir.SweepDir(config, str(config_name))
        stop_on_error(owned.check)  # its own folder, the same jobs as on disk
        stop_on_error(lambda: sweep_dir.check_jobs(config, str(config_name)))
        stop_on_error(owned.claim, undo=owned.give_up)  # locked, checked again, marked

    def on_multirun_end(self, config: DictConfig, **kw) -> None:
        from litlab.runs import sweep_dir

        sweep_dir.release(config)

    def on_run_end(self, config: DictConfig, **kw) -> None:
        release_run_dir(OmegaConf.select(config, "hydra.run.dir"))


def stop_on_error(check, undo=None) -> None:
    """Exit 2 with one line (Hydra would turn an exception into a warning and go on), after
    `undo` (what the checks did so far). Also a launcher's own checks (its code snapshot)."""
    try:
        check()
        return
    except UserError as err:  # before the task: litlab.cli prints it as `error: ...`
        line = str(err)
    except Exception as err:  # noqa: BLE001  (unchecked is refused, not let through)
        refusal = refusal_behind(err)  # a resolver's, under OmegaConf's error
        line = str(refusal) if refusal is not None else f"cannot check the run dir: {one_line(err)}"
    if undo is not None:
        undo()
    print(line, file=sys.stderr)
    raise SystemExit(2) from None


def start(cfg: DictConfig, config_name: str) -> DictConfig:
    """Create `hydra.run.dir` with `.hydra/` and the log file, as `@hydra.main` does; returns
    the task's config (without its `hydra` node, as a `@hydra.main` task receives it)."""
    from hydra.core.utils import configure_log

    from litlab.compat.hydra import save_config

    check_location(cfg)
    lock(cfg, config_name)  # released by `release_run_dir(out)` when the run ends
    out = Path(OmegaConf.select(cfg, "hydra.run.dir")).resolve()
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.runtime.output_dir = str(out)
        cfg.hydra.job.name = config_name
    HydraConfig.instance().set_config(cfg)
    out.mkdir(parents=True, exist_ok=True)
    task_cfg = copy.deepcopy(cfg)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    if cfg.hydra.output_subdir is not None:
        saved = out / str(cfg.hydra.output_subdir)
        save_config(task_cfg, "config.yaml", saved)
        save_config(OmegaConf.masked_copy(cfg, "hydra"), "hydra.yaml", saved)
        save_config(OmegaConf.create(list(cfg.hydra.overrides.task)), "overrides.yaml", saved)
    configure_log(cfg.hydra.job_logging, cfg.hydra.verbose)
    return task_cfg


def only_hydra_files(path) -> bool:
    """True while a run dir holds nothing but what Hydra wrote before the task started."""
    entries = os.listdir(path) if os.path.isdir(path) else []
    return all(e in (".hydra", str(LOCK_FILE)) or e.endswith(".log") for e in entries)


def remove_resume_record(path) -> None:
    """A resume refused before it ran: the `.hydra/resume-<time>/` Hydra saved for it (made
    since this process started; the resolver's time is not kept) goes."""
    for record in (Path(path) / ".hydra").glob("resume-*"):
        if record.is_dir() and not record.is_symlink() and record.stat().st_mtime >= _STARTED:
            shutil.rmtree(record, ignore_errors=True)


def remove(path) -> None:
    """Remove a run dir that bad input left empty, its open log file closed first."""
    for handler in logging.getLogger().handlers[:]:
        if isinstance(handler, logging.FileHandler):
            handler.close()
            logging.getLogger().removeHandler(handler)
    shutil.rmtree(path, ignore_errors=True)
    _remove_empty_parents(Path(path))


def _remove_empty_parents(path: Path) -> None:
    """`<task>/runs/`, made by Hydra for this run alone when it was the first: removed while
    empty, so that a refused first run leaves no folder behind (an empty folder holds nothing a
    user made; `rmdir` removes only empty ones). Only Hydra's own layout (`.../runs/<time>`)."""
    if path.parent.name != "runs":
        return
    for parent in (path.parent, path.parent.parent):
        try:
            parent.rmdir()
        except OSError:  # not empty (other runs), or gone: nothing more to tidy
            return
