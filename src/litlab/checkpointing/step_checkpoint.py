"""`callbacks.step_checkpoint`: last.ckpt every N optimizer steps, for long epochs.

Off (every_n_train_steps=0, the default) it stands aside while another ModelCheckpoint already
writes last.ckpt into the same folder (model_checkpoint does, every epoch): it then writes
nothing and adds nothing to the checkpoints, where a plain idle ModelCheckpoint would write
last.ckpt once more at the end. With no other last.ckpt writer (`callbacks.model_checkpoint=null`)
it behaves as Lightning's ModelCheckpoint and writes last.ckpt when training ends.
"""
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint


def _idle(cb: ModelCheckpoint) -> bool:
    return (not cb._every_n_train_steps and not cb._every_n_epochs
            and cb._train_time_interval is None)


class StepCheckpoint(ModelCheckpoint):
    standing_aside = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        writers = [c for c in trainer.checkpoint_callbacks if c is not self and not _idle(c)
                   and c.save_last and c.dirpath == self.dirpath]
        self.standing_aside = _idle(self) and (not self.save_last or bool(writers))

    def on_train_batch_end(self, *args, **kwargs) -> None:
        if not self.standing_aside:
            super().on_train_batch_end(*args, **kwargs)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self.standing_aside:
            super().on_train_epoch_end(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        if not self.standing_aside:
            super().on_validation_end(trainer, pl_module)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if not self.standing_aside:
            super().on_exception(trainer, pl_module, exception)

    def on_train_end(self, trainer, pl_module) -> None:
        if not self.standing_aside:
            super().on_train_end(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {} if self.standing_aside else super().state_dict()
