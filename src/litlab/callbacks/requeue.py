"""Requeue a scheduler job that was told its time is up (litlab.callbacks.guards.GracefulInterrupt
calls it once last.ckpt is written): the requeued job resumes in its own run dir
(litlab.checkpointing.resume.requeued_checkpoint)."""

import logging
import os
import signal
import subprocess

log = logging.getLogger(__name__)
# the signals a scheduler sends before a job's time limit (SLURM --signal=USR1, submitit USR2)
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def in_scheduler_job() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID"))


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
