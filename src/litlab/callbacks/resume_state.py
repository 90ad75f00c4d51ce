"""Bit-identical resumes, also from a checkpoint written in the middle of an epoch.

Lightning restores weights, optimizer, schedulers and loop counters, but not the random number
generators, and after a mid-epoch checkpoint it restarts the data loader from its first batch
(unless the loader is stateful). A resumed run would then shuffle, augment and drop out
differently from the run it continues. This callback stores, in every checkpoint:

- `rng`: the torch/numpy/python (and CUDA) generator states when the checkpoint was written;
- `epoch_rng` and `skip`, for a mid-epoch checkpoint: the generator states from just before the
  epoch's data loader drew its shuffle, and how many batches of the epoch were already done.

On resume it restores `epoch_rng` (so the loader draws the same order), skips the `skip` batches
already trained on, then restores `rng`. Plain lists and tensors only: the checkpoint still loads
with `torch.load(weights_only=True)`.
"""
import random
import warnings

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback


def rng_state() -> dict:
    """Every generator a training step may draw from, as weights_only-safe values."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


class ResumeState(Callback):
    """Saves and restores what Lightning leaves out, so a resumed run equals an unbroken one."""

    def __init__(self):
        self._trainer = None
        self._epoch_rng: dict | None = None
        self._pending: dict | None = None  # a loaded mid-epoch state, applied at train start
        self._epoch_started = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._trainer = trainer

    def _batches_done(self) -> int:
        """Batches of the current epoch already trained on (0 when the epoch is complete)."""
        t = self._trainer
        if t is None or t.state.fn != "fit":
            return 0
        done = t.fit_loop.epoch_loop.batch_progress.current.processed
        return done if 0 < done < t.num_training_batches else 0

    def state_dict(self) -> dict:
        skip = self._batches_done()
        return {"rng": rng_state(), "epoch_rng": self._epoch_rng if skip else None, "skip": skip}

    def load_state_dict(self, state_dict: dict) -> None:
        # called while the checkpoint is restored, before the train loader draws its order
        if state_dict.get("skip"):
            set_rng_state(state_dict["epoch_rng"])
            self._pending = state_dict
        else:
            set_rng_state(state_dict["rng"])

    def on_fit_start(self, trainer, pl_module) -> None:
        self._epoch_rng = rng_state()  # the first epoch's loader is created after this
        self._epoch_started = False
        if self._pending:  # we skip the done batches ourselves: Lightning's warning is moot
            warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended")

    def on_train_start(self, trainer, pl_module) -> None:
        if not self._pending:
            return
        fetcher = trainer.fit_loop._data_fetcher  # its iterator was created in setup_data
        for _ in range(self._pending["skip"]):
            next(fetcher.iterator)  # not next(fetcher): Lightning already counts these as done
        set_rng_state(self._pending["rng"])
        self._pending = None

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if self._epoch_started:  # later epochs create their loader iterator after this hook
            self._epoch_rng = rng_state()
        self._epoch_started = True
