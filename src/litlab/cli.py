"""Entry-point guard: bad input costs one line and exit code 2, not a traceback.

Two kinds of bad input reach a user:
- Hydra composition errors (unknown group option, unknown key, bad override syntax), raised
  before the task starts. Hydra prints them over several lines; `run` condenses them.
- `UserError`, raised by litlab code for a wrong value, a missing file, a model/data mismatch.
  `task` prints it as one line and removes the run dir that Hydra created for nothing.
Set HYDRA_FULL_ERROR=1 to get full tracebacks instead.
"""
import functools
import io
import os
import re
import shutil
import sys

from litlab.errors import UserError, first_line  # noqa: F401  (raised by everyone, printed here)

EXIT_BAD_INPUT = 2


def _full_errors() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


QUOTING = ("quote a value with spaces or other characters than letters, digits and _-./: "
           "'key=\"my value\"' (the outer quotes are for the shell)")


def _condense_special(lines: list[str]) -> str | None:
    """A traceback (e.g. the run dir cannot be made): its last line. An unquoted value: how
    to quote it."""
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        last = next(ln for ln in reversed(lines) if not ln.startswith(("File ", "Traceback")))
        if "mkdir" in " ".join(lines):
            return f"cannot create the run dir (check paths.log_dir / hydra.run.dir): {last}"
        return last
    lexer = next((ln for ln in lines if "LexerNoViableAltException" in ln), None)
    if lexer:
        text = lexer.split("LexerNoViableAltException:", 1)[1].split(" ^")[0].strip()
        return f"cannot parse override '{text}': {QUOTING}"
    return None


def condense(message: str) -> str:
    """Turn one of Hydra's multi-line composition errors into a single line."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    lines = [ln for ln in lines if "HYDRA_FULL_ERROR" not in ln]
    special = _condense_special(lines)
    if special:
        return special
    missing = re.search(r"Could not find '([^']+)'", message)
    if missing and "Available options" in message:
        group, _, value = missing.group(1).rpartition("/")
        after = message.split("Available options", 1)[1].splitlines()[1:]
        options = []
        for line in after:  # the indented lines right after the heading are the options
            if not line[:1].isspace() or not line.strip():
                break
            options.append(line.strip())
        return f"unknown option {group}={value}; valid {group} options: {', '.join(options)}"
    key = re.search(r"Could not override '([^']+)'", message)
    if key:
        hint = next((ln for ln in lines if ln.startswith("To append")), "")
        hint = hint.replace("To append to your config use", "to add a new key use")
        return f"unknown config key '{key.group(1)}'" + (f" ({hint})" if hint else "")
    lines = [ln for ln in lines if not ln.startswith(("full_key:", "object_type=", "reference_type="))]
    return " ".join(lines)


class _Buffer(io.StringIO):
    """Holds stderr until the task starts (Hydra writes composition errors there)."""


def _export_package_path() -> None:
    """Launchers (submitit, joblib) run jobs in new interpreters that unpickle litlab functions:
    they find the package through PYTHONPATH, as this process finds it beside the script."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, *paths])


def run(hydra_main) -> None:
    """Call a `@hydra.main` function with one-line composition errors."""
    _export_package_path()
    config_name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    if any(a.startswith("ckpt_path=") for a in sys.argv[1:]):  # `last` or a run dir: resume there
        from litlab.checkpointing import resume

        try:
            sys.argv = resume.translate(sys.argv, config_name)
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
        if sys.stderr is buffer:  # the task never started: a composition error
            sys.stderr = real
            text = buffer.getvalue()
            if exit_.code not in (0, None) and text.strip() and not _full_errors():
                message = condense(text)
                key = re.match(r"unknown config key '([^']+)'", message)
                if key:  # a typo: name the closest valid key
                    from litlab.config.validate import closest_key

                    message = message.replace(f"'{key.group(1)}'", f"'{key.group(1)}'" + closest_key(
                        key.group(1), config_name, sys.argv[1:]), 1)
                syntax = re.search(r"at input '([^']*)'", message)
                arg = syntax and next((a for a in sys.argv[1:] if syntax.group(1) in a), None)
                if arg:  # Hydra's parse errors do not say which override
                    message = f"cannot parse override '{arg}': {message}"
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


def task(fn):
    """Decorate a Hydra task: `UserError` becomes one line, exit 2, and no half-made run dir."""

    @functools.wraps(fn)
    def wrapper(cfg):
        _release_stderr()
        out = _output_dir()
        fresh = out is not None and _only_hydra_files(out) and is_rank_zero()
        try:
            return fn(cfg)
        except UserError as err:
            if _full_errors():
                raise
            if _is_multirun():  # a sweep records the failed job and goes on
                raise _one_line_in_sweep(err) from None
            if fresh:
                _close_log_files()
                shutil.rmtree(out, ignore_errors=True)
            if is_rank_zero():  # DDP ranks > 0 fail alike; rank 0 says it once
                print(f"error: {err}", file=sys.stderr)
            sys.exit(getattr(err, "exit_code", EXIT_BAD_INPUT))  # a failed run (NaN) exits 1

    return wrapper


def _one_line_in_sweep(err: UserError) -> UserError:
    """The same error, as one of Hydra's compact exceptions: at the end of a sweep Hydra prints
    its message alone (not a traceback); the job's row in the sweep summary carries it."""
    from hydra.errors import CompactHydraException

    compact = type("UserError", (UserError, CompactHydraException), {})
    new = compact(str(err))
    new.exit_code = getattr(err, "exit_code", EXIT_BAD_INPUT)
    return new


def rank() -> int:
    """Global rank from the launcher's environment, in Lightning's order (0 outside DDP): a
    child rank Lightning (or litlab) starts has LOCAL_RANK only, and SLURM_PROCID can be set
    in an salloc shell that SLURM does not manage."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


def is_rank_zero() -> bool:
    """False in DDP ranks > 0 (they share rank 0's run dir: they never write or remove it)."""
    return rank() == 0 and os.environ.get("NODE_RANK", "0") == "0"


def _only_hydra_files(path: str) -> bool:
    entries = os.listdir(path) if os.path.isdir(path) else []
    return all(e == ".hydra" or e.endswith(".log") for e in entries)


def _close_log_files() -> None:
    import logging

    for handler in logging.getLogger().handlers[:]:
        if isinstance(handler, logging.FileHandler):
            handler.close()
            logging.getLogger().removeHandler(handler)
