"""Entry-point guard: bad input costs one line and exit code 2, not a traceback.

Two kinds of bad input reach a user:
- Hydra composition errors (unknown group option, unknown key, bad override syntax), raised
  before the run starts. Hydra prints them over several lines; `run` condenses them.
- `UserError`, raised by litlab code for a wrong value, a missing file, a model/data mismatch.
  `guard` prints it as one line and removes the run dir that Hydra created for nothing.
Set HYDRA_FULL_ERROR=1 to get full tracebacks instead.
"""

import functools
import io
import os
import sys

from litlab import console, environment, threads
from litlab.checkpointing import resume
from litlab.config import (
    hydra_errors,
    resolvers,  # noqa: F401  (registers the configs' resolvers: cheap)
)
from litlab.errors import DiskFull, UserError, disk_full
from litlab.recipes import run_dir
from litlab.utils.distributed import is_rank_zero

EXIT_BAD_INPUT = 2


def _full_errors() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


class _Buffer(io.StringIO):
    """Holds stderr until the run starts (Hydra writes composition errors there)."""


def _export_package_path() -> None:
    """Launchers (submitit, joblib) run jobs in new interpreters that unpickle litlab functions:
    they find the package through PYTHONPATH, as this process finds it beside the script."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, *paths])


def run(hydra_main) -> None:
    """Call a `@hydra.main` function with one-line composition errors."""
    environment.load_dotenv_files()  # before Hydra composes: the config reads some variables
    _export_package_path()
    config_name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    try:  # ckpt_path=last|<run dir> resumes one run: not with -m
        resume.refuse_in_multirun(config_name, sys.argv[1:])
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    real = sys.stderr
    sys.stderr = buffer = _Buffer()
    try:
        hydra_main()
    except ValueError as err:  # Hydra's argument checks (e.g. --cfg together with -m)
        if sys.stderr is not buffer or _full_errors():
            raise
        sys.stderr = real
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except SystemExit as exit_:
        if sys.stderr is buffer:  # the run never started: a composition error
            sys.stderr = real
            text = buffer.getvalue()
            if exit_.code not in (0, None) and text.strip() and not _full_errors():
                message = hydra_errors.composition_error(text, config_name, sys.argv[1:])
                print(f"error: {message}", file=sys.stderr)
                raise SystemExit(EXIT_BAD_INPUT) from None
            sys.stderr.write(text)
        raise
    finally:
        if sys.stderr is buffer:
            sys.stderr = real
            real.write(buffer.getvalue())


def _release_stderr() -> None:
    stderr = sys.stderr
    if isinstance(stderr, _Buffer):
        sys.stderr = sys.__stderr__
        sys.stderr.write(stderr.getvalue())


def _output_dir() -> str | None:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def main(config_name: str):
    """`@hydra.main` on configs/<config_name>.yaml around `guard`: every entry point's decorator."""
    import hydra

    def decorate(fn):
        return hydra.main(version_base="1.3", config_path="../configs", config_name=config_name)(
            guard(fn)
        )

    return decorate


def guard(fn):
    """Guard an entry point's function: `UserError` becomes one line, exit 2, and no half-made run dir."""

    @functools.wraps(fn)
    def wrapper(cfg):
        _release_stderr()
        console.setup(console.verbose_requested())  # library INFO lines: to the log file only
        out = _output_dir()
        fresh = out is not None and run_dir.only_hydra_files(out) and is_rank_zero()
        try:
            try:
                threads.apply(cfg)  # CPU threads from free cores, before the task imports torch
                _quiet_profiler_natives(cfg)
                return fn(cfg)
            except (UserError, ModuleNotFoundError) as caught:
                extra = environment.missing_extra(caught)  # an optional extra not installed
                if extra is None:
                    raise
                raise UserError(extra) from caught
            except Exception as caught:
                if (full := disk_full(caught)) is None:
                    raise
                where = full.filename or (out if out is not None else "the run dir")
                raise DiskFull(
                    f"the disk is full ({full.strerror}) writing {where}: free space, then "
                    "resume with ckpt_path=last (checkpoints written before are kept)"
                ) from caught
        except UserError as err:
            if _full_errors():
                raise
            if _is_multirun():  # a sweep records the failed job and goes on
                raise _one_line_in_sweep(err) from None
            if fresh:
                run_dir.remove(out)
            elif out is not None and is_rank_zero():  # a refused resume: its record goes
                run_dir.remove_resume_record(out)
            # DDP ranks > 0 fail alike and rank 0 says it once, unless the error is this rank's own
            if is_rank_zero() or getattr(err, "every_rank", False):
                print(f"error: {err}", file=sys.stderr)
            sys.exit(getattr(err, "exit_code", EXIT_BAD_INPUT))  # a failed run (NaN) exits 1

    return wrapper


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


def _one_line_in_sweep(err: UserError) -> UserError:
    """The same error, as one of Hydra's compact exceptions: at the end of a sweep Hydra prints
    its message alone (not a traceback); the job's row in the sweep summary carries it."""
    from hydra.errors import CompactHydraException

    compact = type("UserError", (UserError, CompactHydraException), {})
    new = compact(str(err))
    new.exit_code = getattr(err, "exit_code", EXIT_BAD_INPUT)
    return new
