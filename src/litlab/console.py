"""One page of console per run; everything else goes to the run's log file.

Every entry point (`cli.guard`) and the Python API (`litlab.train`) call `setup()` through
`RunEnd.run` (litlab.runs.run_end) right after Hydra has configured logging (a console handler and `<run dir>/<task>.log`). From then on:
- the log file keeps every INFO line of every library (Hydra, Lightning, ONNX, Flower, ...)
  and every Python warning, with its source line;
- the console shows litlab's own INFO lines (a federated round, a trial of a study) and
  Hydra's (the jobs of a multirun), any WARNING or ERROR, and Python warnings as one
  `warning: ...` line each, except the notices that tell a user nothing about the run
  (deprecations inside libraries, advertisements): those stay in the file.
Lines that only trace what a run did (which class was instantiated) log with
`extra=FILE_ONLY`. `hydra.verbose=true` (or HYDRA_FULL_ERROR=1) shows everything again. A
sweep's launch lines (`#0 : seed=1`) leave out the overrides litlab's sweepers add for a job's
environment (`launch_lines`); the job's log file names them.
"""

import logging
import os
import re
import warnings

#: `log.info(..., extra=FILE_ONLY)`: a litlab line kept out of the console (the file has it)
FILE_ONLY = {"console": False}

# libraries that add a console handler of their own on import (each line printed twice)
_PROPAGATE = ("lightning", "lightning.pytorch", "lightning.fabric")
_NOT_FOR_CONSOLE = (
    "💡 Tip",  # Lightning's advertisement for its cloud packages
    "isinstance(treespec, LeafSpec)",  # Lightning 2.6 on torch 2.14: its own use of a torch API
    "was configured so 100% of the batches",  # explicit limits of 1.0 in configs/trainer
    "not found. Creating it.",  # Lightning's MLflow logger, on a task's first MLflow run
    "exists and is not empty",  # Lightning: checkpoints/ of a run resumed in its own dir
    # Lightning: fewer batches per epoch than log_every_n_steps (a graph's one batch, tiny runs);
    # litlab's metrics are per epoch
    "is smaller than the logging interval",
)
# whose INFO lines the console shows: litlab's, and Hydra's and its launchers' in a multirun
# (`#1 : model.optimizer.lr=0.1`, the sweep dir)
_INFO_ON_CONSOLE = ("litlab", "hydra")
# whose lines of any level stay in the log file: `hydra.utils` logs an ERROR (several lines)
# for a name it cannot locate, then raises; litlab says the raised error in one line
_FILE_ONLY_LOGGERS = ("hydra.utils",)
_DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
# an override of a job's environment that a litlab sweeper adds (a resumed grid job, an Optuna
# trial's ticket): a word, or a quoted value (as `search_space.as_override_value` quotes it)
_JOB_ENVIRONMENT = re.compile(r"\s*\+\+hydra\.job\.env_set\.LITLAB_\w+=(?:'(?:[^'\\]|\\.)*'|\S*)")


class ConsoleFilter(logging.Filter):
    """What a console handler lets through (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "console", True) is False or record.name in _FILE_ONLY_LOGGERS:
            return False
        if record.levelno < logging.WARNING and not record.name.startswith(_INFO_ON_CONSOLE):
            return False
        message = record.getMessage()
        if any(text in message for text in _NOT_FOR_CONSOLE):
            return False
        category = getattr(record, "category", None)
        return not (category is not None and issubclass(category, _DEPRECATIONS))


class ConsoleFormatter(logging.Formatter):
    """litlab's INFO lines as they are; others with their level; warnings in one line."""

    def format(self, record: logging.LogRecord) -> str:
        message = getattr(record, "short", None) or record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {message}"
        return message


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` while set up: a record of the `py.warnings` logger that carries
    the category (the console filter reads it) and a one-line text (the console prints it)."""
    if file is not None:  # an explicit stream (e.g. pytest's capture): as Python would
        _original_show(message, category, filename, lineno, file, line)
        return
    text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
    first = (str(message).strip().splitlines() or [""])[0]
    logging.getLogger("py.warnings").warning(
        "%s", text, extra={"category": category, "short": f"{first} ({category.__name__})"}
    )


_original_show = warnings.showwarning


class _LaunchLine(logging.Filter):
    """A launcher's line without the job-environment overrides litlab's sweepers add."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "env_set.LITLAB_" in message:
            record.msg, record.args = _JOB_ENVIRONMENT.sub("", message), ()
        return True


def launch_lines(launcher) -> None:
    """Keep the job-environment overrides out of `launcher`'s lines (Hydra's basic launcher,
    submitit's, litlab's parallel one: the loggers of the modules of its classes); the
    sweepers call it before they launch (idempotent)."""
    for cls in type(launcher).__mro__:
        logger = logging.getLogger(cls.__module__)
        if not any(isinstance(f, _LaunchLine) for f in logger.filters):
            logger.addFilter(_LaunchLine())


def _record_job_environment() -> None:
    """The job's environment overrides that its launch line left out, in its log file (once:
    by rank 0)."""
    from hydra.core.hydra_config import HydraConfig

    from litlab.utils.distributed import rank

    if HydraConfig.initialized() and rank() == 0:
        hidden = [o for o in HydraConfig.get().overrides.hydra if _JOB_ENVIRONMENT.match(o)]
        if hidden:
            logging.getLogger(__name__).info("launched with %s", " ".join(hidden), extra=FILE_ONLY)


def _is_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(
        handler, logging.FileHandler
    )


class _NoOwnConsole(logging.Logger):
    """A library's logger that refuses console handlers of its own: `import lightning` adds
    one ("INFO: ..."), which printed every line a second time, beside the root's handlers."""

    def addHandler(self, handler: logging.Handler) -> None:
        if not _is_console(handler):
            super().addHandler(handler)


def _own_console_refused(name: str) -> logging.Logger:
    existing = logging.Logger.manager.loggerDict.get(name)
    if isinstance(existing, logging.Logger):  # already imported: drop what it added
        existing.handlers = [h for h in existing.handlers if not _is_console(h)]
        existing.propagate = True
        return existing
    previous = logging.getLoggerClass()
    logging.setLoggerClass(_NoOwnConsole)  # the logger the library will get on import
    try:
        return logging.getLogger(name)
    finally:
        logging.setLoggerClass(previous)


def setup(verbose: bool = False) -> None:
    """Route INFO lines of libraries and Python warnings to the log file only (idempotent).

    `verbose`: leave the console as Hydra configured it (everything on it)."""
    for name in _PROPAGATE:  # their lines go to the root's handlers only (console and file)
        _own_console_refused(name)
    # mlflow configures a stderr handler of its own on import unless told not to
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    if not verbose:
        warnings.showwarning = _show_warning
        consoles = [h for h in logging.getLogger().handlers if _is_console(h)]
        for handler in consoles:
            if not any(isinstance(f, ConsoleFilter) for f in handler.filters):
                handler.addFilter(ConsoleFilter())
                handler.setFormatter(ConsoleFormatter())
    _record_job_environment()


def verbose_requested() -> bool:
    """`hydra.verbose=...` or HYDRA_FULL_ERROR=1: the whole log on the console."""
    from hydra.core.hydra_config import HydraConfig

    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return True
    return HydraConfig.initialized() and bool(HydraConfig.get().verbose)
