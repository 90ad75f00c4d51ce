"""Loggers that Lightning lacks (named by configs/logger/).

Loggers from optional packages (requirements-optional.txt) that need a word of adapting.

A CSVLogger that continues the metrics.csv of a resumed run instead of deleting it.

Lightning's CSV writer removes an existing metrics.csv when it starts ("Previous log files in
this directory will be deleted"), which erases the history of a run resumed in its own run
dir (`ckpt_path=last`). This one keeps the file and its columns and appends to it.

A resumed run continues its W&B and MLflow runs instead of starting new ones.

A run resumed in its own run dir (`ckpt_path=last`, or a requeued SLURM/submitit job: see
litlab.checkpointing.resume) reuses the ids its loggers got the first time: each id is kept in
a small file in the run dir (`wandb_run_id.txt`, `mlflow_run_id.txt`), written by rank 0 when
the logger first starts and read back when the run dir already has one. W&B gets `id=` and
`resume="allow"` (offline runs too: `wandb sync` merges them); MLflow gets `run_id=`."""

import logging
import uuid
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from litlab.compat.lightning_csv import appending_experiment


# -------------------------------------------------------------- optional
def neptune_logger(offline: bool = True, **kwargs):
    """The `neptune` package's own NeptuneLogger (Lightning 2.6 dropped its copy). `offline`
    stands for neptune's `mode` (offline | async), a key name litlab's checks keep for min|max."""
    from neptune.integrations.pytorch_lightning import NeptuneLogger

    return NeptuneLogger(mode="offline" if offline else "async", **kwargs)


# --------------------------------------------------------- resumable csv
class ResumableCSVLogger(CSVLogger):
    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        return appending_experiment(self)


# --------------------------------------------------------------- run ids
log = logging.getLogger(__name__)


def id_file(run_dir, name: str) -> Path:
    return Path(run_dir) / f"{name}_run_id.txt"


def stored_id(run_dir, name: str) -> str | None:
    """The id a logger `name` had in this run dir, or None."""
    if run_dir is None:
        return None
    path = id_file(run_dir, name)
    value = path.read_text().strip() if path.is_file() else ""
    return value or None


@rank_zero_only
def store_id(run_dir, name: str, value: str) -> None:
    if run_dir is not None and value and stored_id(run_dir, name) != value:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        id_file(run_dir, name).write_text(f"{value}\n")


class ResumableWandbLogger(WandbLogger):
    """Lightning's WandbLogger whose run id belongs to the run dir (`run_dir`): the same id
    whenever the run is resumed there."""

    def __init__(self, run_dir: str | None = None, id: str | None = None, **kwargs):
        if id is None and run_dir is not None:
            id = stored_id(run_dir, "wandb")
            if id is None:
                id = uuid.uuid4().hex[:12]
                store_id(run_dir, "wandb", id)
            else:
                log.info("W&B: continuing run %s", id)
        kwargs.setdefault("resume", "allow")
        super().__init__(id=id, **kwargs)
