"""Tuning before fit (`tune=lr`, `tune=batch_size`, or both: `tune=[lr,batch_size]`).

Lightning's finders, run on the trainer, model and datamodule of the run itself, which they
leave as they found them (weights and step restored) except for the value they set: the
suggested learning rate replaces the optimizer's `lr`, the found batch size the datamodule's
`batch_size`. Each prints its result, logs it (`tune/lr`, `tune/batch_size`) and writes its
files into <run dir>/tune/. Lightning's tuner needs a single device: refused under DDP."""

import contextlib
import dataclasses
import functools
import json
import logging
from pathlib import Path

from litlab.errors import UserError, one_line
from litlab.utils.distributed import is_rank_zero

log = logging.getLogger(__name__)


def run(tuners: list, trainer, model, datamodule) -> None:
    """Run the configured finders in order (called once, right before `trainer.fit`)."""
    if not tuners:
        return
    strategy = type(trainer.strategy).__name__
    if trainer.world_size > 1 or strategy != "SingleDeviceStrategy":
        raise UserError(
            f"tune=... cannot run under {strategy} ({trainer.world_size} processes): "
            f"Lightning's finders need one device; tune with trainer=default, then "
            f"train with the value it prints"
        )
    with _explicit_weights_only(trainer):
        for tuner in tuners:
            tuner(trainer, model, datamodule)


@contextlib.contextmanager
def _explicit_weights_only(trainer):
    """Lightning's finders save the run's state to a temporary checkpoint and restore it when
    done, both with `weights_only` unset: saving then logs a notice and restoring relies on
    torch's default. Here both are explicit: the whole state is saved (the optimizer's too,
    tensors and plain values only) and it is read back with `weights_only=True`, as every
    checkpoint of litlab is."""
    connector, save = trainer._checkpoint_connector, trainer.save_checkpoint
    restore = connector.restore

    def save_whole(filepath, weights_only=None, storage_options=None):
        whole = False if weights_only is None else weights_only  # callers that set it: as is
        return save(filepath, weights_only=whole, storage_options=storage_options)

    def restore_weights_only(checkpoint_path=None, weights_only=None):
        return restore(checkpoint_path, weights_only=True)

    trainer.save_checkpoint, connector.restore = save_whole, restore_weights_only
    try:
        yield
    finally:
        del trainer.save_checkpoint, connector.restore  # the class's methods again


def _out_dir(trainer) -> Path:
    path = Path(trainer.default_root_dir) / "tune"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _report(trainer, name: str, value, text: str, extra: dict) -> None:
    for logger in trainer.loggers:
        logger.log_metrics({f"tune/{name}": float(value)}, step=0)
    if is_rank_zero():
        (_out_dir(trainer) / f"{name}.json").write_text(
            json.dumps({name: value, **extra}, indent=2)
        )
        print(text, flush=True)


def _lightning_args(finder, mode: str) -> dict:
    """A finder's fields as keyword arguments of Lightning's tuner method: the field named
    `mode` here (the config's `spacing` or `search`) is the one Lightning calls `mode`."""
    args = dataclasses.asdict(finder)
    args["mode"] = args.pop(mode)
    return args


@dataclasses.dataclass
class LearningRateFinder:
    """Lightning's LR range test: `num_training` steps from `min_lr` to `max_lr`, stopped early
    when the loss exceeds `early_stop_threshold` times its best; the suggestion is the steepest
    descent of the smoothed loss curve (plot: tune/lr_find.png)."""

    min_lr: float = 1e-6
    max_lr: float = 1.0
    num_training: int = 100
    spacing: str = "exponential"
    early_stop_threshold: float | None = 4.0

    def __call__(self, trainer, model, datamodule) -> float | None:
        from lightning.pytorch.tuner import Tuner

        finder = Tuner(trainer).lr_find(
            model, datamodule=datamodule, update_attr=False, **_lightning_args(self, "spacing")
        )
        lr = finder.suggestion() if finder is not None else None
        if lr is None:
            log.warning("LR finder: no suggestion (too few steps ran); keeping the config's lr")
            return None
        if is_rank_zero():
            import matplotlib.pyplot as plt

            fig = finder.plot(suggest=True, show=False)
            fig.savefig(_out_dir(trainer) / "lr_find.png", dpi=90, bbox_inches="tight")
            plt.close(fig)
        # the optimizer is a partial from config (LitModule builds it at fit): rebind its lr
        model._optimizer = functools.partial(model._optimizer, lr=lr)
        _report(
            trainer,
            "lr",
            lr,
            f"LR finder: suggested lr {lr:.4g} (searched {self.min_lr:g} to {self.max_lr:g} "
            f"in {len(finder.results['lr'])} steps); training with it",
            {"searched": [self.min_lr, self.max_lr], "results": finder.results},
        )
        return lr


@dataclasses.dataclass
class BatchSizeFinder:
    """Lightning's batch-size scaler: `power` doubles from `init_val` until a trial runs out of
    memory (or `max_trials`, or the dataset size); `binsearch` then bisects."""

    search: str = "power"
    steps_per_trial: int = 3
    init_val: int = 2
    max_trials: int = 25

    def __call__(self, trainer, model, datamodule) -> int | None:
        from lightning.fabric.utilities.exceptions import MisconfigurationException
        from lightning.pytorch.tuner import Tuner

        try:
            size = Tuner(trainer).scale_batch_size(
                model, datamodule=datamodule, **_lightning_args(self, "search")
            )
        except MisconfigurationException as err:  # e.g. full-graph data have no batch_size
            raise UserError(f"tune=batch_size cannot run here: {one_line(err)}") from None
        _report(
            trainer,
            "batch_size",
            size,
            f"Batch-size finder: batch_size={size} ({self.search} search from {self.init_val}); "
            f"training with it",
            {"search": self.search},
        )
        return size
