"""The process a command runs in: `.env`, machine-local environment variables (the names are in
.env.example), read once when a command or `litlab.train` starts, before the config is composed
(it reads some of them, e.g. LITLAB_DATA_DIR; variables already set in the environment win over
the file); the extras a missing package comes with; the collector's work once the imports are
done (`freeze_imports`)."""

import gc
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def load_dotenv_files() -> list[Path]:
    """Read `.env` of the folder the command runs from, then the project root's (the first
    that sets a name wins); returns the files read."""
    from dotenv import load_dotenv

    read = []
    for folder in dict.fromkeys([Path.cwd(), PROJECT_ROOT]):
        path = folder / ".env"
        if path.is_file():
            load_dotenv(path, override=False)
            read.append(path)
    return read


# top-level modules of the optional extras (pyproject.toml) -> the extra that installs them
EXTRAS = {
    "mlflow": "mlflow",
    "flwr": "federated",
    "ray": "federated",
    "medmnist": "medmnist",
    "torch_tensorrt": "gpu",
    "comet_ml": "loggers",
    "neptune": "loggers",
    "aim": "loggers",
}


def missing_extra(err: BaseException) -> str | None:
    """For an import of an extra's package that failed (directly, or as the cause of another
    error): one line naming the extra to install; else None."""
    while err is not None and not isinstance(err, ModuleNotFoundError):
        err = err.__cause__
    if err is None or not err.name:
        return None
    extra = EXTRAS.get(err.name.split(".")[0])
    if extra is None:
        return None
    return (
        f"{err.name} is not installed: it comes with the '{extra}' extra "
        f"(pip install -e '.[{extra}]'; `make` installs every extra from requirements.txt)"
    )


#: set by `litlab.cli.run_main`: this process is an entry point's, whose collector litlab tunes
#: (`litlab.train` from Python leaves the caller's as it is)
ENTRY_POINT: list[bool] = []


def freeze_imports() -> None:
    """The run starts, its imports done: torch, Lightning and the rest made some 500,000
    objects the collector tracks, which live as long as the process. In an entry point's
    process, freeze them once (a forked sweep job has its launcher's frozen already), without
    a collection first (one over them is the ~0.3 s this saves): the collections left scan
    only what the run makes, the last one too, which `litlab.cli` runs at exit so that the
    run's cyclic garbage is finalized. What the imports left as cyclic garbage stays unfreed:
    nothing of it is a file that a run writes (those are made after this)."""
    if ENTRY_POINT and not gc.get_freeze_count():
        gc.freeze()
