"""Reports the monitored val metric to the Optuna trial each epoch and stops a bad trial early.

Active only inside an Optuna search: the sweeper hands each job its trial through the
`LITLAB_OPTUNA_TRIAL` environment variable (a no-op otherwise, so the config can stay on).
Rank 0 alone talks to the study; under DDP its decision is broadcast so that every rank stops
at the same epoch (optuna-integration is not installed, and this is all that is needed of it).
"""

import json
import os

from lightning.pytorch.callbacks import Callback

ENV = "LITLAB_OPTUNA_TRIAL"


def load_trial(ticket: str):
    """The running trial, from the JSON ticket the sweeper put in the environment."""
    import hydra
    import optuna

    spec = json.loads(ticket)
    pruner = hydra.utils.instantiate(spec["pruner"]) if spec.get("pruner") else None
    study = optuna.load_study(
        study_name=spec["study"],
        storage=spec["storage"],
        pruner=pruner or optuna.pruners.NopPruner(),
    )
    return optuna.Trial(study, spec["trial_id"])


class OptunaPruning(Callback):
    def __init__(self, monitor: str):
        self.monitor = monitor
        self.ticket = os.environ.get(ENV)
        self._trial = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.ticket and trainer.is_global_zero and self._trial is None:
            self._trial = load_trial(self.ticket)

    def on_validation_end(self, trainer, pl_module) -> None:
        if not self.ticket or trainer.sanity_checking:
            return
        epoch, value, prune = trainer.current_epoch, None, False
        if trainer.is_global_zero:
            value = trainer.callback_metrics.get(self.monitor)
            if value is not None:
                self._trial.report(float(value), step=epoch)
                prune = self._trial.should_prune()
        if trainer.strategy.broadcast(prune, src=0):
            import optuna

            raise optuna.TrialPruned(f"pruned at epoch {epoch} ({self.monitor}={value})")
