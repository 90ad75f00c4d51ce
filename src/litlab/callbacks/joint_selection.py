"""Model selection on several validation metrics at once, as the GAT paper's code does it
(Velickovic et al., 2018; `execute_cora.py` of the authors' repository):

- training goes on while any monitored metric reaches its best so far (ties count), and stops
  once none has for `patience` validations in a row (`JointEarlyStopping`);
- the checkpoint kept is the last one at which every monitored metric was at its best so far,
  ties included (`JointModelCheckpoint`), and it is the one tested after fitting.

Lightning's `EarlyStopping` and `ModelCheckpoint` follow a single metric: on Cora, 500
validation nodes make `val/acc` plateau for dozens of epochs, so a single-metric rule stops on
a flat stretch or keeps an early epoch that `val/loss` still improves on. Both callbacks keep
their state in checkpoints, so a resumed run selects as an uninterrupted one.
"""

import math
from pathlib import Path
from typing import Annotated, Literal

from annotated_types import MinLen
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from litlab.bounds import NonNegInt
from litlab.errors import UserError

Mode = Literal["min", "max"]
Monitors = Annotated[dict[str, Mode], MinLen(1)]


class _Bests:
    """The best value of each monitored metric so far, and which of them the latest
    validation matched or beat."""

    def __init__(self, monitors: dict[str, Mode]):
        self.monitors = dict(monitors)
        self.best = {
            name: math.inf if mode == "min" else -math.inf for name, mode in monitors.items()
        }

    def update(self, metrics) -> list[bool]:
        """Compare the latest values with the bests (ties count), then update the bests."""
        at_best = []
        for name, mode in self.monitors.items():
            value = float(metrics[name])
            better = value <= self.best[name] if mode == "min" else value >= self.best[name]
            at_best.append(better)
            if better:
                self.best[name] = value
        return at_best


def _check_monitors(settings, key: str) -> None:
    """Each metric's mode is min or max (the signature check reads the dict, not its values)."""
    for name, mode in (settings.get("monitors") or {}).items():
        if mode not in ("min", "max"):
            raise UserError(f"{key}.monitors.{name}={mode}: use min or max")


def _skip(trainer) -> bool:
    return trainer.sanity_checking or bool(trainer.fast_dev_run)


class JointEarlyStopping(Callback):
    """Stop when no monitored metric has matched or beaten its best for `patience`
    validations in a row."""

    check_settings = staticmethod(_check_monitors)

    def __init__(self, monitors: Monitors, patience: NonNegInt = 100):
        self.patience = patience
        self._bests = _Bests(monitors)
        self.wait = 0

    def on_validation_end(self, trainer, pl_module) -> None:
        if _skip(trainer):
            return
        # the metrics are synced across DDP ranks: every rank takes the same decision
        self.wait = 0 if any(self._bests.update(trainer.callback_metrics)) else self.wait + 1
        if self.wait >= self.patience:
            trainer.should_stop = True

    def state_dict(self) -> dict:
        return {"best": dict(self._bests.best), "wait": self.wait}

    def load_state_dict(self, state_dict: dict) -> None:
        self._bests.best.update(state_dict["best"])
        self.wait = state_dict["wait"]


class JointModelCheckpoint(ModelCheckpoint):
    """Keep one checkpoint: the latest at which every monitored metric was at its best so far.
    `best_model_path` points at it, so the recipes test it as they test ModelCheckpoint's."""

    check_settings = staticmethod(_check_monitors)

    def __init__(
        self, monitors: Monitors, dirpath: str | Path | None = None, filename: str | None = None
    ):
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            monitor=None,
            save_top_k=1,
            save_last=False,
            save_on_train_epoch_end=False,
            auto_insert_metric_name=False,
            enable_version_counter=False,
        )
        self._bests = _Bests(monitors)

    def on_validation_end(self, trainer, pl_module) -> None:
        if _skip(trainer) or not all(self._bests.update(trainer.callback_metrics)):
            return
        metrics = {**trainer.callback_metrics, "epoch": trainer.current_epoch}
        path = self.format_checkpoint_name(metrics)
        previous = self.best_model_path
        trainer.save_checkpoint(path, self.save_weights_only)
        if previous and previous != path:
            trainer.strategy.remove_checkpoint(previous)
        first = next(iter(self._bests.monitors))
        self.best_model_path = path
        self.best_model_score = trainer.callback_metrics[first].detach().clone()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """Selection happens after validation only."""

    def state_dict(self) -> dict:
        return {**super().state_dict(), "joint_best": dict(self._bests.best)}

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._bests.best.update(state_dict.get("joint_best", {}))
