"""Loggers that Lightning lacks or that need a word of adapting (named by configs/logger/;
the optional packages' ones: requirements-optional.txt).

`ResumableCSVLogger`: Lightning's CSV writer removes an existing metrics.csv when it starts
("Previous log files in this directory will be deleted"), which erases the history of a run
resumed in its own run dir (`ckpt_path=last`). This one keeps the file and its columns and
appends to it.

A run resumed in its own run dir (`ckpt_path=last`, or a requeued SLURM/submitit job: see
litlab.checkpointing.resume) continues its W&B and MLflow runs: each id is kept in a small file
in the run dir (`wandb_run_id.txt`, `mlflow_run_id.txt`), written by rank 0 when the logger
first starts and read back when the run dir already has one. W&B gets `id=` and
`resume="allow"` (offline runs too: `wandb sync` merges them); MLflow gets `run_id=`.

MLflow, offline: a local SQLite store (default <log_dir>/mlflow.db, artifacts beside it in
<log_dir>/mlflow/), no server and no account; SQLite is MLflow's recommended local store
(mlflow 3 keeps the file store behind a switch). Lightning's MLFlowLogger already sends the
flattened config as params and every logged metric with its step; this adds the run's
artifacts (its config and best checkpoint; the inspection callbacks add their plots) and takes
the list of tags the other loggers take. Loggers log on rank 0 only under DDP. Browsing the
store: README.md, `mlflow ui`."""

import logging
import os
import uuid
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from litlab.compat.lightning import appending_experiment, mlflow_initialized, mlflow_run_id


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


# ---------------------------------------------------------------- mlflow
class LocalMLFlowLogger(MLFlowLogger):
    """`tracking_uri` wins when given (e.g. a server; MLFLOW_TRACKING_URI when the config sets
    none); else the SQLite store `db`, whose experiments keep their artifacts in `save_dir`.
    `run_dir`: the run's folder, whose .hydra/config.yaml is uploaded and which keeps the
    MLflow run id: a run resumed there continues the same MLflow run."""

    def __init__(
        self,
        experiment_name: str = "litlab",
        run_name: str | None = None,
        save_dir: str = "mlflow",
        db: str | None = None,
        tracking_uri: str | None = None,
        tags: list[str] | None = None,
        run_dir: str | None = None,
        log_best_checkpoint: bool = True,
        **kwargs,
    ):
        tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not tracking_uri:
            db = Path(db) if db else Path(save_dir).parent / "mlflow.db"
            db.parent.mkdir(parents=True, exist_ok=True)
            tracking_uri = "sqlite:///" + str(db.resolve())  # sqlite:////abs/path.db
            # a new experiment's artifacts: beside the store, not in the cwd's ./mlruns
            kwargs.setdefault("artifact_location", Path(save_dir).resolve().as_uri())
        self._resumed_run = kwargs.get("run_id") or stored_id(run_dir, "mlflow")
        kwargs["run_id"] = self._resumed_run
        super().__init__(
            experiment_name=experiment_name,
            run_name=run_name or None,
            tracking_uri=tracking_uri,
            save_dir=save_dir,
            tags={str(t): "true" for t in tags or []},
            **kwargs,
        )
        self.run_dir = Path(run_dir) if run_dir else None
        self.log_best_checkpoint = log_best_checkpoint
        self._uploaded: set[str] = set()
        self._selector = None  # the ModelCheckpoint that picks the best checkpoint

    @property
    @rank_zero_experiment
    def experiment(self):
        # Lightning calls mlflow.set_tracking_uri, which exports MLFLOW_TRACKING_URI to the
        # process: the next run of this process (the Python API, a test worker) and every
        # child would log into this run's store instead of its own. The environment is kept.
        before = os.environ.get("MLFLOW_TRACKING_URI")
        try:
            client = super().experiment
        finally:
            if before is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = before
        store_id(self.run_dir, "mlflow", mlflow_run_id(self))
        return client

    @rank_zero_only
    def log_hyperparams(self, params) -> None:
        """A continued run keeps its first params (MLflow refuses changed values, and a resumed
        run's ckpt_path differs); new keys are added."""
        if not self._resumed_run:
            return super().log_hyperparams(params)
        from litlab.compat.lightning import flat_params

        known = self.experiment.get_run(self.run_id).data.params
        new = {k: v for k, v in flat_params(params).items() if k not in known}
        if new:
            super().log_hyperparams(new)

    def after_save_checkpoint(self, checkpoint_callback) -> None:
        super().after_save_checkpoint(checkpoint_callback)
        if getattr(checkpoint_callback, "monitor", None):
            self._selector = checkpoint_callback

    def upload(self, path, folder: str | None = None) -> None:
        """Send a file once (finalize runs after fit and again after test)."""
        path = Path(path)
        if path.is_file() and str(path) not in self._uploaded:
            self.experiment.log_artifact(self.run_id, str(path), folder)
            self._uploaded.add(str(path))

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if mlflow_initialized(self) and status == "success":
            if self.run_dir is not None:
                self.upload(self.run_dir / ".hydra" / "config.yaml", "config")
            best = self._selector and self._selector.best_model_path
            if self.log_best_checkpoint and best:
                self.upload(best, "checkpoints")
        super().finalize(status)
