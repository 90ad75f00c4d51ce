"""`last.ckpt` at the end of every epoch (and every N optimizer steps), whatever the metric did.

Lightning 2.6's `ModelCheckpoint(save_last=True)` rewrites "last" only alongside a top-k save,
so a run killed after epochs that did not improve the monitored metric resumed from the last
improvement, and retrained the epochs since. This callback writes `last.ckpt` at each training
epoch end (after validation, so the epoch's metrics and loop state are in it), and after every
`every_n_train_steps` optimizer steps when that is > 0 (long epochs). The write is atomic (the
trainer's `AtomicCheckpointIO`), so a kill during it leaves the previous file whole.
"""

from lightning.pytorch.callbacks import ModelCheckpoint

from litlab.bounds import NonNegInt
from litlab.compat.lightning import save_last_checkpoint


class LastCheckpoint(ModelCheckpoint):
    def __init__(self, dirpath: str | None = None, every_n_train_steps: NonNegInt = 0):
        # Lightning wants step and epoch triggers exclusive; the epoch save is ours anyway
        super().__init__(
            dirpath=dirpath,
            monitor=None,
            save_top_k=0,
            save_last=True,
            every_n_train_steps=every_n_train_steps or None,
            every_n_epochs=None if every_n_train_steps else 1,
            save_on_train_epoch_end=True,
            enable_version_counter=False,
        )

    def _skip(self, trainer) -> bool:
        from lightning.pytorch.trainer.states import TrainerFn

        return (
            bool(trainer.fast_dev_run)
            or trainer.state.fn != TrainerFn.FITTING
            or trainer.sanity_checking
        )

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # also when a step save happened at this very step: the epoch-end state supersedes it
        if not self._skip(trainer):
            save_last_checkpoint(self, trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        """Nothing: the epoch's save comes at train epoch end, after validation."""
