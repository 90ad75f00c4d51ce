"""One shape for a run, and what a run dir keeps when its task stops on an error, decided when
the error happens.

Both entry routes (`litlab.cli.guard` and `litlab.api.run`) make a `RunEnd` before the task and
run the task through it (`RunEnd.run`: the console set up, CPU threads applied, the task's
exception replaced by the one-line error it stands for), which calls `failed(err)` with whatever
stops it, or `finished()` when it returns; the routes differ only in how they show an error (the
CLI prints one line and exits, the API raises). Whether the dir goes is decided then, from what
the dir holds at that moment, not at the start: training may have written checkpoints since,
and the error's message may point at them.

- Bad input before the run wrote a checkpoint: a run dir that was fresh when the task started
  is removed (DEVELOPERS.md: no half-written run dir); a resume refused before it wrote a
  checkpoint keeps its run as it was, without the `.hydra/resume-*` record Hydra saved for it
  and without a `failed.json` or a resume command that would repeat the refused setting.
- Anything else (a checkpoint exists: a NaN loss, an unreadable image, a full disk, an
  unexpected exception, Ctrl-C, SIGTERM; or an exception that is not litlab's one-line kind)
  deletes nothing: the dir is kept and `failed.json` says what stopped it, when, and the
  command that resumes it. A one-line error that names no resume gets that command appended,
  with the run's own overrides (a resume is composed from the command line, so the printed
  command must repeat them to work as printed). A resume that later finishes removes it.
Only rank 0 decides (DDP ranks > 0 run the same task in the same dir). A sweep job's dir is
never removed (the sweep summary lists the job), and gets no resume command (a sweep job is
resumed with its own overrides, which the summary shows).

What a recipe returns: enough for a notebook or a sweep to go on without parsing logs.

A net that cannot run on the data, or data that cannot be set up, told in one line: the first
forward pass of `model.net` in a run (Lightning's sanity check, or the first training step) is
watched; an error raised inside it becomes a `UserError` naming `model.net`, its target and the
input shape, instead of a traceback from deep inside the loop. The watch ends after the first
forward that works (no cost per step after it). An error raised in the datamodule's
`prepare_data`/`setup` (called by Lightning inside fit) names `data` and its target."""

import contextlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from litlab import console, environment, threads
from litlab.checkpointing.resume import RESUMABLE_CONFIGS, checkpoint_of
from litlab.checkpointing.run_lock import LOCK_FILE
from litlab.errors import DiskFull, UserError, disk_full, one_line, refusal_behind
from litlab.runs import run_dir
from litlab.utils import commands
from litlab.utils.distributed import is_rank_zero

FAILED = "failed.json"  # in a run dir: what stopped it, and how to resume it
BAD_INPUT = 2
OWN_STOP_LINE = ("federate",)  # entry points whose recipe prints a stop's resume itself


def _own_files(out) -> dict[str, tuple[int, int]]:
    """(size, mtime) of the files the task writes: not Hydra's, the log file, the lock or
    `failed.json`. A change between start and error means the run wrote into its dir."""
    found = {}
    for root, dirs, files in os.walk(out):  # symlinks to folders are not followed
        rel = os.path.relpath(root, out)
        if rel == ".hydra" or rel.startswith(".hydra" + os.sep):
            continue
        for name in files:
            if rel == "." and (name in (FAILED, str(LOCK_FILE)) or name.endswith(".log")):
                continue
            path = os.path.join(root, name)
            try:
                stat = os.lstat(path)
            except OSError:
                continue
            found[os.path.join(rel, name)] = (stat.st_size, stat.st_mtime_ns)
    return found


def holds_checkpoint(out) -> bool:
    """Finished work: a checkpoint anywhere in the run dir (written atomically, so whole)."""
    return any(name.endswith(".ckpt") for _, _, files in os.walk(out) for name in files)


def resume_command(config_name: str, overrides, out) -> str:
    """The command that resumes the run in `out`: this run's overrides, its `ckpt_path`
    replaced by the run dir, relative files and folders made absolute (`paths.*`, the data's:
    it is run from the project folder, the run may have been started elsewhere)."""
    from litlab.config.data_paths import absolute_override

    kept = [str(o) for o in overrides if str(o).lstrip("+").split("=", 1)[0] != "ckpt_path"]
    args = [*map(absolute_override, kept), f"ckpt_path={os.path.abspath(out)}"]
    return commands.command(config_name, args)


def as_user_error(caught: BaseException, out) -> UserError | None:
    """The one-line error a task's exception stands for, if any: a missing optional extra, a
    setting Lightning refuses when it meets the data (`limit_train_batches=0.01` of 21
    batches), a full disk (torch wraps it in a RuntimeError), or litlab's own refusal that a
    library wrapped (a resolver's, under OmegaConf's InterpolationResolutionError); None for
    the others."""
    if (refusal := refusal_behind(caught)) is not None:
        return UserError(str(refusal))
    if isinstance(caught, (UserError, ModuleNotFoundError)):
        extra = environment.missing_extra(caught)
        return UserError(extra) if extra is not None else None
    lightning_errors = sys.modules.get("lightning.fabric.utilities.exceptions")
    if lightning_errors and isinstance(caught, lightning_errors.MisconfigurationException):
        return UserError(f"Lightning refused a setting: {one_line(caught, limit=400)}")
    if not isinstance(caught, Exception) or (full := disk_full(caught)) is None:
        return None
    where = full.filename or (out if out is not None else "the run dir")
    written = out is not None and os.path.isdir(out) and holds_checkpoint(out)
    then = (
        "then resume from the checkpoints written before"
        if written
        else "then run again (no checkpoint was written)"
    )
    return DiskFull(f"the disk is full ({full.strerror}) writing {where}: free space, {then}")


def call(task, cfg, out):
    """`task(cfg)`, its exception replaced by the one-line error it stands for where there is
    one (`as_user_error`): both entry routes run their task through this."""
    try:
        return task(cfg)
    except BaseException as caught:
        error = as_user_error(caught, out)
        if error is None:
            raise
        raise error from caught


def _exit_code(err: BaseException) -> int:
    if isinstance(err, SystemExit):
        return err.code if isinstance(err.code, int) else 1
    if isinstance(err, UserError):
        return getattr(err, "exit_code", BAD_INPUT)
    return 1


def _what(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"stopped (exit code {_exit_code(err)})"
    if isinstance(err, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(err, UserError):
        return str(err)
    return one_line(err, with_type=True, limit=400)


def _quiet_profiler_natives(cfg) -> None:
    """Under `profiler=`, torch's C++ warnings ("Memory block of unknown size was allocated
    before the profiling started", one per tensor alive at its start) and Kineto's device probe
    (`gpuGetDeviceCount failed` on a machine without a GPU) are noise on the console: both
    libraries read their log level from the environment once, when torch is imported (after
    this). The profiler's own report is unaffected."""
    trainer = cfg.get("trainer") if hasattr(cfg, "get") else None
    if trainer is not None and trainer.get("profiler"):
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")


class RunEnd:
    """The run dir `out` as its task starts (see the module docstring); `out` None: no run dir."""

    def __init__(self, out, config_name: str, overrides=(), sweep: bool = False):
        self.run_dir = out  # every rank's; `out` is rank 0's alone (it decides the dir's end)
        self.out = str(out) if out is not None and is_rank_zero() else None
        self.resumable = config_name in RESUMABLE_CONFIGS and not sweep
        self.config_name, self.overrides, self.sweep = config_name, list(overrides), sweep
        self.fresh = self.out is not None and run_dir.only_hydra_files(self.out)
        self.before = _own_files(self.out) if self.out is not None else {}

    def run(self, task, cfg):
        """`task(cfg)` as both entry routes run it: library INFO lines to the log file only, CPU
        threads from free cores before the task imports torch, its exception the one-line
        error it stands for (`call`); then the dir is removed or kept (`failed`) or its earlier
        failure record cleared (`finished`), and the exception goes on to the route."""
        console.setup(console.verbose_requested())
        try:
            threads.apply(cfg)
            _quiet_profiler_natives(cfg)
            result = call(task, cfg, self.run_dir)
        except BaseException as err:
            if isinstance(err, SystemExit) and err.code in (0, None):
                self.finished()
            else:
                self.failed(err)  # may append the command that resumes the run
            raise
        self.finished()
        return result

    def failed(self, err: BaseException) -> None:
        """Remove the run dir, or keep it marked failed; a UserError's message may gain the
        command that resumes the run."""
        if self.out is None or not os.path.isdir(self.out):
            return
        work = holds_checkpoint(self.out)
        now = _own_files(self.out)
        checkpointed = any(
            name.endswith(".ckpt") and self.before.get(name) != stat for name, stat in now.items()
        )
        if isinstance(err, UserError) and not work and not self.sweep:
            if self.fresh:  # bad input before anything finished: no half-written run dir
                run_dir.remove(self.out)
            else:  # a resume refused before it ran
                run_dir.remove_resume_record(self.out)
            return
        if isinstance(err, UserError) and _exit_code(err) == BAD_INPUT and not checkpointed:
            # refused before it trained (a setting Lightning meets with the data, after the
            # logger rewrote its files): the run's work is as it was, and a resume that
            # repeated this command would be refused again
            run_dir.remove_resume_record(self.out)
            return
        command = self._resume_command()
        self._mark(err, command)
        if isinstance(err, UserError) and command and "ckpt_path=" not in str(err):
            err.args = (f"{err}; resume: {command}",)

    def resume_line(self) -> str | None:
        """`resume: <command>` for a run stopped with a resumable checkpoint, else None
        (federate.py says how to resume a stopped federation itself: federated/federation.py)."""
        if self.out is None or self.config_name in OWN_STOP_LINE:
            return None
        command = self._resume_command()
        return f"resume: {command}" if command else None

    def finished(self) -> None:
        """The run ended well: an earlier failure's record no longer applies."""
        if self.out is not None:
            Path(self.out, FAILED).unlink(missing_ok=True)

    def _resume_command(self) -> str | None:
        if not self.resumable or not checkpoint_of(Path(self.out)).is_file():
            return None
        return resume_command(self.config_name, self.overrides, self.out)

    def _mark(self, err: BaseException, command: str | None) -> None:
        record = {
            "error": _what(err),
            "exit_code": _exit_code(err),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "resume": command,
        }
        try:  # the disk may be full: the record is a courtesy, the checkpoints are kept anyway
            Path(self.out, FAILED).write_text(json.dumps(record, indent=1) + "\n")
        except OSError:
            pass


# ------------------------------------------------- what a recipe returns
@dataclass
class RunResult:
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. {"test/acc": 0.99, ...}
    run_dir: Path | None = None  # logs/<task_name>/runs/<timestamp>/ (what the CLI writes)
    best_checkpoint: str | None = None  # best by the model's monitor, else last; None if none


# ------------------------------------------------------------ the first forward
def _shapes(args) -> str:
    shapes = [str(list(a.shape)) for a in args if getattr(a, "shape", None) is not None]
    return " and ".join(shapes) or "?"


def _in_data_setup(err: BaseException, datamodule) -> bool:
    """The error was raised inside `datamodule.prepare_data` or `setup`."""
    return any(
        frame.f_code.co_name in ("prepare_data", "setup")
        and frame.f_locals.get("self") is datamodule
        for frame, _ in traceback.walk_tb(err.__traceback__)
    )


class _Watch:
    """The hooks on `net`: a module-level class, so a net that a spawning strategy pickles
    (`trainer=ddp_spawn`) pickles with them (its ranks' errors are not rewritten: they run in
    other processes)."""

    def __init__(self, net):
        self.inside, self.shape = False, "?"
        self.handles = [
            net.register_forward_pre_hook(self.before),
            net.register_forward_hook(self.after),
        ]

    def before(self, module, args):
        self.inside, self.shape = True, _shapes(args)

    def after(self, module, args, output):
        self.inside = False
        self.remove()  # it runs: stop watching

    def remove(self):
        for handle in self.handles:
            handle.remove()


@contextlib.contextmanager
def watched(net, target: str, key: str = "model.net", datamodule=None, data_target: str = ""):
    """Around `trainer.fit`/`trainer.test`: one line if the first forward of `net` fails, or
    (given `datamodule`) if its setup does."""
    watch = _Watch(net)
    try:
        yield
    except UserError:
        raise
    except Exception as err:
        if datamodule is not None and not watch.inside and _in_data_setup(err, datamodule):
            raise UserError(f"data ({data_target}) cannot be set up: {one_line(err)}") from err
        if not watch.inside:
            raise
        raise UserError(
            f"{key} ({target}) cannot run on the data: input of shape {watch.shape}: "
            f"{one_line(err)}; check the net's settings against the data (e.g. strides, "
            "kernel sizes, channels)"
        ) from err
    finally:
        watch.remove()
