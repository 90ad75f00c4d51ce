"""Entry-point guard: bad input costs one line and exit code 2, not a traceback.

Two kinds of bad input reach a user:
- Hydra composition errors (unknown group option, unknown key, bad override syntax), raised
  before the run starts. Hydra prints them over several lines; `run_main` condenses them.
- `UserError`, raised by litlab code for a wrong value, a missing file, a model/data mismatch.
  `guard` prints it as one line and removes the run dir that Hydra created for nothing, unless
  the run has written a checkpoint since (`runs.run_end`: then it is kept, marked failed).
Set HYDRA_FULL_ERROR=1 to get full tracebacks instead.
"""

import atexit
import functools
import gc
import io
import os
import sys

from litlab import environment
from litlab.checkpointing import resume
from litlab.compat.hydra import skip_mode_compose
from litlab.config import (
    compose,
    resolvers,  # noqa: F401  (registers the configs' resolvers: cheap)
)
from litlab.errors import UserError
from litlab.runs import run_end
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


#: the cyclic garbage collector's thresholds in an entry point's process (Python's default:
#: (700, 10, 10), a collection of the youngest objects every 700 allocations). Importing
#: torch, Lightning and torchvision allocates some 1.5 million objects that live on, and the
#: collector went over them ~1,300 times: ~1 s of the imports' 5.6 s of CPU on this 2-core
#: machine, again in every composition-heavy check. 50,000 leaves few collections to do, each
#: over at most 50,000 young objects (a few MB), and cyclic garbage is still collected
#: (BENCHMARKS.md "The garbage collector at start-up")
GC_THRESHOLDS = (50_000, 10, 10)


def _freeze_at_exit() -> None:
    """Collect what is garbage now, then freeze the rest: the interpreter's own collections as
    it shuts down skip the millions of objects of torch, Lightning and the rest. A process that
    imported Lightning took 1.5 s to exit, 0.5 s so (cyclic garbage is still finalized here,
    files flushed; what stays alive is freed by the process's end, not by the collector). A run
    froze its imports' objects as it started (`environment.freeze_imports`): this collection
    scans what the run made."""
    gc.collect()
    gc.freeze()


def run_main(hydra_main) -> None:
    """Call a `@hydra.main` function with one-line composition errors."""
    gc.set_threshold(*GC_THRESHOLDS)  # before Hydra's work and the libraries' imports
    environment.ENTRY_POINT[:] = [True]  # the run freezes its imports' objects as it starts
    atexit.unregister(_freeze_at_exit)  # once per process, whatever calls this in-process
    atexit.register(_freeze_at_exit)  # registered before the libraries' own: run after them
    environment.load_dotenv_files()  # before Hydra composes: the config reads some variables
    _export_package_path()
    skip_mode_compose()  # one compose less where no config can set hydra.mode
    config_name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    try:  # ckpt_path=last|<run dir> resumes one run: not with -m
        resume.refuse_in_multirun(config_name, sys.argv[1:])
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    real, buffer = sys.stderr, _Buffer()
    sys.stderr = buffer  # held until the run starts (`guard`, `run_started` release it)
    try:
        hydra_main()
    except (ValueError, SystemExit) as err:  # ValueError: Hydra's argument checks
        if sys.stderr is not buffer:  # the run started: its own exit or error
            raise
        sys.stderr = real
        message = _composition_error(err, buffer.getvalue(), config_name)
        if message is None:
            real.write(buffer.getvalue())
            raise
        print(f"error: {message}", file=real)
        raise SystemExit(EXIT_BAD_INPUT) from None
    finally:
        if sys.stderr is buffer:  # the run never started, and nothing above said why
            sys.stderr = real
            real.write(buffer.getvalue())


def _composition_error(err: BaseException, text: str, config_name: str) -> str | None:
    """The one line for what stopped Hydra before the run started (a composition error it
    printed, or an argument it refused), or None to let it through as it is."""
    if _full_errors():
        return None
    if isinstance(err, ValueError):  # e.g. --cfg together with -m
        return str(err)
    if err.code not in (0, None) and text.strip():
        return compose.composition_error(text, config_name, sys.argv[1:])
    return None


def _release_stderr() -> None:
    stderr = sys.stderr
    if isinstance(stderr, _Buffer):
        sys.stderr = sys.__stderr__
        sys.stderr.write(stderr.getvalue())


def run_started() -> None:
    """A launcher that runs the jobs in other processes (hydra/launcher=parallel) calls this as
    the sweep starts, as `guard` does for a job run here: from then on stderr is the user's, and
    an exit (a stopped sweep's 1 or 143) is not a composition error."""
    _release_stderr()


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
    """Guard an entry point's function: `UserError` becomes one line, exit 2; the run dir is
    removed or kept as `run_end` decides when the error happens (nothing finished is deleted)."""

    @functools.wraps(fn)
    def wrapper(cfg):
        _release_stderr()
        end = run_end.RunEnd(_output_dir(), *_job(), sweep=_is_multirun())
        try:
            return end.run(fn, cfg)
        except UserError as err:
            if _full_errors():
                raise
            if _is_multirun():  # a sweep records the failed job and goes on
                raise _one_line_in_sweep(err) from None
            # DDP ranks > 0 fail alike and rank 0 says it once, unless the error is this rank's own
            if is_rank_zero() or getattr(err, "every_rank", False):
                print(f"error: {err}", file=sys.stderr)
            sys.exit(getattr(err, "exit_code", EXIT_BAD_INPUT))  # a failed run (NaN) exits 1
        except BaseException as err:  # a stop (SIGTERM, Ctrl-C) or a crash: nothing is deleted
            stopped = not (isinstance(err, SystemExit) and err.code in (0, None))
            if stopped and not _is_multirun() and (line := end.resume_line()) is not None:
                print(line, file=sys.stderr)
            raise

    return wrapper


def _job() -> tuple[str, list[str]]:
    """This job's config name and its command-line overrides (what a resume repeats)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return "", []
    hc = HydraConfig.get()
    return str(hc.job.config_name), list(hc.overrides.task)


def _one_line_in_sweep(err: UserError) -> UserError:
    """The same error, as one of Hydra's compact exceptions: at the end of a sweep Hydra prints
    its message alone (not a traceback); the job's row in the sweep summary carries it."""
    from hydra.errors import CompactHydraException

    compact = type("UserError", (UserError, CompactHydraException), {})
    new = compact(str(err))
    new.exit_code = getattr(err, "exit_code", EXIT_BAD_INPUT)
    return new
