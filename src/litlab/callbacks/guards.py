"""Clean stops: a non-finite loss, Ctrl-C, and out-of-memory.

- `NonFiniteLossGuard` checks the loss before `backward`, so the step that produced NaN/Inf
  never reaches the weights; it stops the run with a message that names the step and the last
  good checkpoint (which it does not overwrite).
- `GracefulInterrupt` turns the first Ctrl-C (SIGINT) into: finish the current batch, write
  `last.ckpt`, close the loggers, exit 1. A second Ctrl-C stops at once. SIGTERM (how SLURM,
  Kubernetes and `timeout` stop a job) is handled alike: Lightning finishes the batch and raises
  its SIGTERMException on every rank; this writes `last.ckpt` and makes the exit code 143
  (128 + 15, what a shell reports for a process that SIGTERM ended), not 0. Under SLURM,
  Lightning's SLURMEnvironment also requeues the job on its requeue signal (SIGUSR1, see
  docs/reliability.md). After an out-of-memory error it writes `last.ckpt` too (one process
  only: a collective save could hang under DDP).
Both checkpoints resume with `ckpt_path=<run dir>` or `ckpt_path=last`.
"""

import logging
import math
import signal
import threading
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from litlab.errors import UserError

log = logging.getLogger(__name__)
EXIT_SIGTERM = 128 + signal.SIGTERM


class NonFiniteLoss(UserError):
    """The loss became NaN or Inf: reported in one line, exit 1 (not bad input)."""

    exit_code = 1


def last_checkpoint_path(trainer) -> Path:
    cb = trainer.checkpoint_callback
    default = Path(trainer.default_root_dir) / "checkpoints"
    folder = cb.dirpath if cb is not None and cb.dirpath else default
    return Path(folder) / f"{ModelCheckpoint.CHECKPOINT_NAME_LAST}{ModelCheckpoint.FILE_EXTENSION}"


def _resume_hint(trainer) -> str:
    path = last_checkpoint_path(trainer)
    if not path.is_file():
        return "no checkpoint was written yet"
    run = path.parent.parent
    return f"last good checkpoint: {path} (resume: python src/train.py ckpt_path={run})"


class NonFiniteLossGuard(Callback):
    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        # one host sync per step on GPUs; .item() on a scalar costs a fraction of isfinite()
        finite = (
            math.isfinite(loss.item())
            if loss.numel() == 1
            else bool(torch.isfinite(loss.detach()).all())
        )
        if trainer.world_size > 1:  # every rank stops together, none waits in an all-reduce
            finite = trainer.strategy.reduce_boolean_decision(finite, all=True)
        if not finite:
            batch = trainer.fit_loop.epoch_loop.batch_idx + 1
            raise NonFiniteLoss(
                f"training loss is {loss.item()} at global step {trainer.global_step} "
                f"(epoch {trainer.current_epoch}, batch {batch}); the weights were not updated; "
                f"{_resume_hint(trainer)}; lower model.optimizer.lr or set "
                f"trainer.gradient_clip_val"
            )


class GracefulInterrupt(Callback):
    def __init__(self):
        self._requested = False
        self._previous = None

    def _handler(self, signum, frame) -> None:
        if self._requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self._requested = True
        log.warning("Ctrl-C: finishing this batch, then saving last.ckpt (Ctrl-C again: stop now)")

    def on_fit_start(self, trainer, pl_module) -> None:
        self._requested = False
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)

    def _restore(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        stop = self._requested
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            self._save(trainer, "interrupted")
            self._restore()
            raise KeyboardInterrupt  # Lightning closes the loggers and exits 1

    def on_fit_end(self, trainer, pl_module) -> None:
        self._restore()
        if self._requested:  # Ctrl-C during the last validation: do not go on to test
            raise KeyboardInterrupt

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(exception, SIGTERMException):
            self._restore()
            if trainer.state.fn == "fit" and not trainer.sanity_checking:
                self._save(trainer, "SIGTERM")
            exception.code = EXIT_SIGTERM  # Lightning re-raises it: the process exits 143
            return
        if isinstance(exception, KeyboardInterrupt):
            self._previous = None  # Lightning now ignores SIGINT while it shuts down: keep that
        self._restore()
        if isinstance(exception, torch.OutOfMemoryError) and trainer.world_size == 1:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self._save(trainer, "out of memory")

    def _save(self, trainer, why: str) -> None:
        path = last_checkpoint_path(trainer)
        trainer.save_checkpoint(path)
        if trainer.is_global_zero:
            log.warning(
                "%s at global step %d; resumable checkpoint: %s (resume: python "
                "src/train.py ckpt_path=%s)",
                why,
                trainer.global_step,
                path,
                path.parent.parent,
            )
