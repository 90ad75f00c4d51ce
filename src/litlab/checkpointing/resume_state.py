"""Bit-identical resumes, also from a checkpoint written in the middle of an epoch.

Lightning restores weights, optimizer, schedulers and loop counters, but not the random number
generators, and after a mid-epoch checkpoint it restarts the data loader from its first batch.
A resumed run would then shuffle, augment and drop out differently from the run it continues.
`ResumeState` stores `rng` (the generators at the save) and, for a mid-epoch checkpoint,
`epoch_rng` (the generators from just before the epoch's loader drew its shuffle) and `skip`
(the batches already done). On resume it restores `epoch_rng`, skips `skip` batches, then
restores `rng`. A save while a batch was in flight (out of memory) rewinds torch's generators to
before that batch; numpy's and Python's are stored as they are at the save (reading them after
every batch would cost 0.1-0.3 ms a step). It also stores the latest metrics, which a resume
that trains nothing more reports as the unbroken run does, and flushes the loggers at each save
(the logs on disk are never behind the checkpoint). Plain lists and tensors only: the
checkpoint still loads with `torch.load(weights_only=True)`.

`LastCheckpoint` writes `last.ckpt` at every training epoch end (after validation) and every
`every_n_train_steps` optimizer steps: Lightning 2.6's `save_last=True` rewrites "last" only
alongside a top-k save, so a killed run resumed from the last improvement and retrained the
epochs since. The write is atomic (`AtomicCheckpointIO`)."""

import random
import warnings

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from litlab.bounds import NonNegInt
from litlab.compat.lightning import save_last_checkpoint


def torch_rng_state() -> tuple:
    """torch's generators (CPU, this process's GPU): microseconds, so taken after every batch.

    Only the current device's CUDA generator: a DDP rank draws on its own GPU only, and the
    checkpoint (rank 0's) must restore on any number of GPUs."""
    # is_initialized, not is_available: a flag read (is_available costs ~0.2 ms mid-training),
    # and an uninitialized CUDA has drawn nothing
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def rng_state(torch_state: tuple | None = None) -> dict:
    """Every generator a training step may draw from, as weights_only-safe values (torch's may
    come from an earlier `torch_rng_state()`; numpy's and Python's are read now)."""
    cpu, cuda = torch_state or torch_rng_state()
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": cpu,
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
    }
    if cuda is not None:
        state["cuda"] = cuda
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if state.get("cuda") is not None and torch.cuda.is_available():
        cuda = state["cuda"]
        if isinstance(cuda, (list, tuple)):  # checkpoints written before 2026-11-30: all GPUs
            cuda = cuda[min(torch.cuda.current_device(), len(cuda) - 1)]
        torch.cuda.set_rng_state(cuda.cpu())


def _metrics(trainer) -> dict[str, float]:
    """The trainer's latest scalar metrics as floats (empty before it has any)."""
    if trainer is None:
        return {}
    return {
        k: float(v)
        for k, v in trainer.callback_metrics.items()
        if isinstance(v, torch.Tensor) and v.numel() == 1
    }


class ResumeState(Callback):
    """Saves and restores what Lightning leaves out, so a resumed run equals an unbroken one."""

    def __init__(self):
        self._trainer = None
        self._epoch_rng: dict | None = None
        self._after_batch_rng: tuple | None = None  # torch_rng_state() after the last batch
        self._pending: dict | None = None  # a loaded mid-epoch state, applied at train start
        self.resumed_metrics: dict[str, float] = {}  # the metrics of the checkpoint resumed

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._trainer = trainer

    def state_dict(self) -> dict:
        t = self._trainer
        boundary = {"rng": rng_state(), "epoch_rng": None, "skip": 0, "metrics": _metrics(t)}
        if t is None or t.state.fn != "fit":
            return boundary
        progress = t.fit_loop.epoch_loop.batch_progress.current
        in_flight = progress.ready > progress.processed  # saved from on_exception (OOM)
        done = progress.processed
        if not in_flight and not 0 < done < t.num_training_batches:
            return boundary  # between epochs: the next loader draws from `rng`
        # a batch in flight was already augmented: keep the state from before it
        rng = rng_state(self._after_batch_rng if in_flight else None) if done else None
        return {**boundary, "rng": rng, "epoch_rng": self._epoch_rng, "skip": done}

    def load_state_dict(self, state_dict: dict) -> None:
        # called while the checkpoint is restored, before the train loader draws its order
        stored = state_dict.get("metrics")  # a checkpoint is data: plain numbers by name only
        self.resumed_metrics = {
            k: float(v)
            for k, v in (stored.items() if isinstance(stored, dict) else ())
            if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        }
        if state_dict.get("epoch_rng") is not None:
            set_rng_state(state_dict["epoch_rng"])
            self._pending = state_dict
        else:
            set_rng_state(state_dict["rng"])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._after_batch_rng = torch_rng_state()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        for logger in trainer.loggers:  # the logs on disk are never behind the checkpoint
            logger.save()

    def on_fit_start(self, trainer, pl_module) -> None:
        self._epoch_rng = rng_state()  # the first epoch's loader is created after this
        if self._pending:  # we skip the done batches ourselves: Lightning's warning is moot
            warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended")

    def on_train_start(self, trainer, pl_module) -> None:
        if not self._pending:
            return
        from litlab.compat.lightning import data_fetcher

        fetcher = data_fetcher(trainer)  # its iterator was created in setup_data
        for _ in range(self._pending["skip"]):
            next(fetcher.iterator)  # not next(fetcher): Lightning already counts these as done
        if self._pending["rng"] is not None:
            set_rng_state(self._pending["rng"])
            self._after_batch_rng = torch_rng_state()  # for an OOM in the first batch
        self._pending = None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # validation is over; the next epoch's loader draws its order after this (Lightning
        # skips on_train_epoch_start for an epoch resumed mid-way, so not there)
        self._epoch_rng = rng_state()


# ------------------------------------------------------------------ last
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

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # also when a step save happened at this very step: the epoch-end state supersedes it
        fitting = trainer.state.fn == "fit" and not trainer.sanity_checking
        if fitting and not trainer.fast_dev_run:
            save_last_checkpoint(self, trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        """Nothing: the epoch's save comes at train epoch end, after validation."""
