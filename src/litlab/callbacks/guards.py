"""Clean stops: a non-finite loss, Ctrl-C, SIGTERM, a scheduler's time-limit signal and
out-of-memory (what each prints and its exit code: docs/reliability.md).

- `NonFiniteLossGuard` checks the loss before `backward`, so the step that produced NaN/Inf
  never reaches the weights; it stops the run with a message that names the step and the last
  good checkpoint (which it does not overwrite).
- `GracefulInterrupt` turns the first Ctrl-C (SIGINT) into: finish the current batch, write
  `last.ckpt`, close the loggers, exit 1. A second Ctrl-C stops at once. SIGTERM (how SLURM,
  Kubernetes and `timeout` stop a job) is handled alike, exit code 143 (128 + 15, what a shell
  reports for a process that SIGTERM ended), not 0. In a scheduler job SIGUSR1 and SIGUSR2
  (sent before the time limit) do the same, then requeue the job (`requeue`); exit 128 + the
  signal. After an out-of-memory error it writes `last.ckpt` too (one process only: a
  collective save could hang under DDP).
Where it stops decides whether the resume is bit-identical. Mid-epoch it saves at the end of the
batch, where the step checkpoints are written. On an epoch's last batch a checkpoint from there
would resume in the next epoch, skipping this one's validation and end; so the epoch finishes
first (its `last.ckpt` is written after validation) and the run stops then. A stop during
validation lets the validation finish (`on_validation_end`), then stops at the next batch's
end, or at the epoch's end after the epoch's validation. A stop during the test after fit
leaves the final `last.ckpt`: the resume trains nothing more and tests.
Both checkpoints resume with `ckpt_path=<run dir>` or `ckpt_path=last`."""

import logging
import math
import os
import signal
import subprocess
import threading
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from litlab.compat import lightning as compat
from litlab.errors import UserError

log = logging.getLogger(__name__)
EXIT_SIGTERM = 128 + signal.SIGTERM
_CTRL_C, _SIGTERM, _REQUEUE = 1, 2, 3  # stop requests, the stronger one larger


class NonFiniteLoss(UserError):
    """The loss became NaN or Inf: reported in one line, exit 1 (not bad input)."""

    exit_code = 1


def last_checkpoint_path(trainer) -> Path:
    cb = trainer.checkpoint_callback
    default = Path(trainer.default_root_dir) / "checkpoints"
    folder = cb.dirpath if cb is not None and cb.dirpath else default
    return Path(folder) / f"{ModelCheckpoint.CHECKPOINT_NAME_LAST}{ModelCheckpoint.FILE_EXTENSION}"


def _resume_hint(trainer) -> str:
    """The checkpoint to go on from; the entry point appends the command that resumes it with
    the run's own overrides (litlab.runs.run_end), which this callback does not know."""
    path = last_checkpoint_path(trainer)
    return f"last good checkpoint: {path}" if path.is_file() else "no checkpoint was written yet"


class NonFiniteLossGuard(Callback):
    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        # one host sync per step on GPUs; .item() on a scalar costs a fraction of isfinite()
        if loss.numel() == 1:
            finite = math.isfinite(loss.item())
        else:
            finite = bool(torch.isfinite(loss.detach()).all())
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
        self._requested = False  # Ctrl-C seen by this process
        self._deferred_sigterm = False  # a SIGTERM during validation (see on_validation_end)
        self._stop = 0  # the stop under way (_CTRL_C or _SIGTERM), once agreed by every rank
        self._stop_epoch = -1  # the epoch whose end it waits for (stop on its last batch)
        self._previous = None
        self._requeue_signal = 0  # SIGUSR1/SIGUSR2 seen by this process (in a scheduler job)
        self._previous_requeue: dict = {}  # the handlers they replaced (submitit's requeue)

    def _requeue_handler(self, signum, frame) -> None:
        self._requeue_signal = signum
        log.warning(
            "%s: finishing this batch, then saving last.ckpt and requeuing the job",
            signal.Signals(signum).name,
        )

    def _handler(self, signum, frame) -> None:
        if self._requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self._requested = True
        log.warning("Ctrl-C: finishing this batch, then saving last.ckpt (Ctrl-C again: stop now)")

    def on_fit_start(self, trainer, pl_module) -> None:
        self._requested, self._stop, self._stop_epoch = False, 0, -1
        self._deferred_sigterm = False
        self._requeue_signal = 0
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            if os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID"):
                for signum in REQUEUE_SIGNALS:
                    self._previous_requeue[signum] = signal.signal(signum, self._requeue_handler)

    def on_train_start(self, trainer, pl_module) -> None:
        """Replace Lightning's SIGTERM handler (registered after on_fit_start) by one without
        a collective: Lightning's broadcasts from rank 0 inside the handler, which deadlocks
        when it interrupts the other rank in another collective (seen under trainer=fsdp; a
        rank signalled twice, by the cluster and by its parent, would broadcast twice). The
        ranks agree on the stop at the batch's end instead (on_train_batch_end)."""
        if threading.current_thread() is threading.main_thread() and trainer.world_size > 1:
            self._trainer = trainer
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._sigterm)

    def _sigterm(self, signum, frame) -> None:
        from litlab.compat.lightning import received_sigterm, set_received_sigterm

        if not received_sigterm(self._trainer):
            log.info("SIGTERM: finishing this batch, then saving last.ckpt")
            launcher = self._trainer.strategy.launcher
            if launcher is not None:  # the local ranks this process started get it too
                launcher.kill(signum)
        set_received_sigterm(self._trainer)

    def _restore(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if getattr(self, "_previous_sigterm", None) is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        for signum, handler in self._previous_requeue.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous_requeue = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._stop:  # waiting for an epoch's end that a min_epochs kept from ending the fit
            if trainer.current_epoch > self._stop_epoch:
                self._end(trainer, save=True)
            return
        if not (stop := self._agreed_stop(trainer)):
            return
        self._stop = stop
        if batch_idx + 1 < trainer.num_training_batches:
            self._end(trainer, save=True)
        # the epoch's last batch: validate and end the epoch (its last.ckpt), then stop
        self._stop_at_epoch_end(trainer)

    def on_validation_batch_end(self, trainer, *args, **kwargs) -> None:
        """SIGTERM during validation in fit: Lightning would stop mid-validation, and a
        checkpoint from there resumes without that validation's metrics (metric states are
        not checkpointed; EarlyStopping and the checkpoint callbacks then find no val metric).
        The validation finishes instead; the stop comes at the next batch's end, or at the
        epoch's end after the epoch's validation (on_train_epoch_end)."""
        if trainer.received_sigterm and trainer.state.fn == "fit" and not trainer.sanity_checking:
            compat.clear_received_sigterm(trainer)
            self._deferred_sigterm = True

    on_validation_end = on_validation_batch_end

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """A stop asked for during the epoch's validation (after its last batch): the epoch
        ends (its last.ckpt follows this hook), then the run stops."""
        if not self._stop and (stop := self._agreed_stop(trainer)):
            self._stop = stop
            self._stop_at_epoch_end(trainer)

    def _agreed_stop(self, trainer) -> int:
        """The strongest stop requested of any rank (0: none); every rank calls it alike."""
        if self._requeue_signal:
            stop = _REQUEUE
        elif trainer.received_sigterm or self._deferred_sigterm:
            stop = _SIGTERM
        else:
            stop = _CTRL_C if self._requested else 0
        if trainer.world_size > 1:  # one collective: the strongest request of any rank
            code = torch.tensor(stop, device=trainer.strategy.root_device)
            stop = int(trainer.strategy.reduce(code, reduce_op="max"))
        return stop

    def _stop_at_epoch_end(self, trainer) -> None:
        self._stop_epoch = trainer.current_epoch
        compat.clear_received_sigterm(trainer)  # Lightning's own stop: mid-validation
        trainer.should_stop = True
        log.warning("%s: ending this epoch (validation, last.ckpt), then stopping", self._why)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._restore()
        if self._stop:  # the epoch it waited for has ended the fit
            self._end(trainer, save=not _last_checkpoint_is_current(trainer))
        if self._requested:  # Ctrl-C during the last validation: do not go on to test
            raise KeyboardInterrupt

    @property
    def _why(self) -> str:
        if self._stop == _REQUEUE:
            return "time limit or preemption signal"
        return "SIGTERM" if self._stop == _SIGTERM else "interrupted"

    def _end(self, trainer, save: bool) -> None:
        if save:
            trainer.save_checkpoint(last_checkpoint_path(trainer))
        self._report(trainer, self._why)
        previous = dict(self._previous_requeue)
        self._restore()
        self._stop_epoch = math.inf  # ended: on_exception saves nothing more
        if self._stop == _REQUEUE:
            signum = self._requeue_signal or signal.SIGUSR1
            requeue(trainer, signum, previous.get(signum))
            raise SIGTERMException(128 + signum)  # Lightning closes the loggers, then exits
        if self._stop == _SIGTERM:
            raise SIGTERMException(EXIT_SIGTERM)  # Lightning closes the loggers, then exits 143
        raise KeyboardInterrupt  # Lightning closes the loggers and exits 1

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        ended = self._stop_epoch == math.inf
        if isinstance(exception, SIGTERMException):
            self._restore()
            if trainer.state.fn == "fit" and not trainer.sanity_checking and not ended:
                self._save(trainer, "SIGTERM")  # it came during validation
            if not ended:  # Lightning re-raises it: the process exits 143
                exception.code = EXIT_SIGTERM
            return
        if isinstance(exception, KeyboardInterrupt):
            self._previous = None  # Lightning now ignores SIGINT while it shuts down: keep that
        self._restore()
        if isinstance(exception, torch.OutOfMemoryError) and trainer.world_size == 1:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self._save(trainer, "out of memory")

    def _save(self, trainer, why: str) -> None:
        trainer.save_checkpoint(last_checkpoint_path(trainer))
        self._report(trainer, why)

    @staticmethod
    def _report(trainer, why: str) -> None:
        if trainer.is_global_zero:
            path = last_checkpoint_path(trainer)
            # the entry point prints the command that resumes it (litlab.runs.run_end)
            log.warning(
                "%s at global step %d; resumable checkpoint: %s", why, trainer.global_step, path
            )


def _last_checkpoint_is_current(trainer) -> bool:
    """True when a `save_last` checkpoint callback (callbacks.last_checkpoint) wrote last.ckpt
    at this very step."""
    return any(
        cb.save_last and compat.last_global_step_saved(cb) == trainer.global_step
        for cb in trainer.checkpoint_callbacks
    )


# --------------------------------------------------------------- requeue
# the signals a scheduler sends before a job's time limit (SLURM --signal=USR1, submitit USR2)
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def requeue(trainer, signum: int, previous) -> None:
    """Requeue the job after last.ckpt is written: submitit's handler when it set one (it
    pickles the job through the launcher's `checkpoint` hook and requeues or resubmits it; it
    may exit here), else `scontrol requeue` from rank 0 under SLURM. Lightning's own SLURM
    handler is not called: it would save a second (hpc) checkpoint."""
    if callable(previous) and "submitit" in getattr(previous, "__module__", ""):
        previous(signum, None)
        return
    job = os.environ.get("SLURM_JOB_ID")
    if not job or not trainer.is_global_zero:
        return
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array and os.environ.get("SLURM_ARRAY_TASK_ID"):
        job = f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job], check=False, capture_output=True, text=True
        )
    except FileNotFoundError:
        log.warning("scontrol not found: SLURM job %s was not requeued (resubmit it)", job)
        return
    if done.returncode == 0:
        log.warning("requeued SLURM job %s: it resumes from last.ckpt in this run dir", job)
    else:
        log.warning("scontrol requeue %s failed: %s", job, done.stderr.strip()[:200])
