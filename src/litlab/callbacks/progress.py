"""Lightning's rich progress bar, with its per-batch work throttled to what the eye can see."""

import time

from lightning.pytorch.callbacks import RichProgressBar


class ThrottledRichProgressBar(RichProgressBar):
    """Updates the training bar and its metrics at most `refresh_rate` times a second.

    Lightning's bar advances its task and re-reads every logged metric after each training
    batch, about 0.1 ms: 1% of a small model's step (bench/overhead.py). Frames are drawn
    `refresh_rate` times a second anyway; the last batch of an epoch is always shown.
    """

    def __init__(self, refresh_rate: int = 10, **kwargs):
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self._next_update = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        last = batch_idx + 1 >= self.total_train_batches
        if now < self._next_update and not last and self.train_progress_bar_id is not None:
            return
        self._next_update = now + 1 / max(self.refresh_rate, 1)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
