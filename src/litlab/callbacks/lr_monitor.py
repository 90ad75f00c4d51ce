"""Lightning's LearningRateMonitor, which a run without loggers (`logger=null`, debug configs)
can keep: there it does nothing, where Lightning's raises at the start of training."""

from lightning.pytorch.callbacks import LearningRateMonitor as _LightningMonitor


class LearningRateMonitor(_LightningMonitor):
    def on_train_start(self, trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_start(trainer, *args, **kwargs)

    def on_train_batch_start(self, trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_batch_start(trainer, *args, **kwargs)

    def on_train_epoch_start(self, trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_epoch_start(trainer, *args, **kwargs)
