"""Test-only fault injection, added to a real run from the command line:

    +callbacks.fault._target_=faults.Fault +callbacks.fault.step=5 +callbacks.fault.kind=sigkill

(the subprocess needs `tests/` on PYTHONPATH). At the start of the batch that follows
`step` optimizer steps, on rank `rank` (-1: on every rank), it does one of the kinds below;
`stage=validate` (or `test`) does it at the start of validation (test) batch `batch` instead,
once `step` optimizer steps were taken (validation during fit, not the sanity check):
  sigkill            kill -9 this process (nothing can clean up)
  sigint             send this process Ctrl-C (SIGINT)
  sigterm            send this process SIGTERM (how SLURM, Kubernetes and `timeout` stop jobs)
  sigusr1            send this process SIGUSR1 (SLURM's `--signal=USR1@120` before the time limit)
  sigusr2            send this process SIGUSR2 (submitit's preemption / time-limit signal)
  oom                raise torch.OutOfMemoryError, as CUDA does
  nan_input          fill the batch's inputs with NaN
  kill_during_save   kill -9 in the middle of writing the next checkpoint file
  disk_full          every later checkpoint write fails as on a full disk (torch's RuntimeError
                     around an OSError ENOSPC)
  delete             delete the files below `path` (a dataset's images, mid-run)
  raise              raise a RuntimeError that litlab does not know (a crash)

`faults.EnvFault` takes its settings from the environment variable FAULT instead
(`kind@stage:step[:batch]`, e.g. `sigterm@validate:6:1`; unset: nothing happens), so that the
command a failed run prints for its resume, which repeats the run's overrides, is run as printed
without the fault.
"""

import errno
import os
import shutil
import signal
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback


class Fault(Callback):
    def __init__(
        self,
        step: int,
        kind: str = "sigkill",
        rank: int = 0,
        stage: str = "train",
        batch: int = 0,
        path: str = "",
    ):
        self.step, self.kind, self.rank = step, kind, rank
        self.stage, self.batch, self.path = stage, batch, path

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.stage == "train":
            self._strike(trainer, batch)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        if self.stage == "validate" and batch_idx == self.batch and not trainer.sanity_checking:
            self._strike(trainer, batch)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        if self.stage == "test" and batch_idx == self.batch:
            self._strike(trainer, batch)

    def _strike(self, trainer, batch) -> None:
        if trainer.global_step != self.step or self.rank not in (trainer.global_rank, -1):
            return  # rank=-1: every rank (as SLURM and torchrun signal every task)
        if self.kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.kind == "sigint":
            os.kill(os.getpid(), signal.SIGINT)
        elif self.kind == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        elif self.kind == "sigusr1":
            os.kill(os.getpid(), signal.SIGUSR1)
        elif self.kind == "sigusr2":
            os.kill(os.getpid(), signal.SIGUSR2)
        elif self.kind == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory (simulated by tests/faults.py)")
        elif self.kind == "nan_input":
            batch[0].fill_(float("nan"))
        elif self.kind == "kill_during_save":
            real_save = torch.save

            def half_then_die(obj, f, *args, **kwargs):
                real_save(obj, f, *args, **kwargs)
                f.truncate(f.tell() // 2)  # half the bytes on disk, then the process dies
                f.flush()
                os.kill(os.getpid(), signal.SIGKILL)

            torch.save = half_then_die
        elif self.kind == "disk_full":
            torch.save = _no_space
        elif self.kind == "delete":
            for item in Path(self.path).iterdir():
                shutil.rmtree(item) if item.is_dir() else item.unlink()
        elif self.kind == "raise":
            raise RuntimeError("something litlab does not know went wrong (tests/faults.py)")
        else:
            raise ValueError(f"unknown fault kind {self.kind}")


def _no_space(obj, f, *args, **kwargs):
    """torch.save on a full disk: its writer's RuntimeError, the OSError as its context."""
    try:
        name = getattr(f, "name", f)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(name))
    except OSError:
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")


class EnvFault(Fault):
    """A Fault set by the environment variable FAULT (see the module docstring); in a sweep,
    FAULT_JOB=<n> keeps it to job n (the other jobs run as the resumed sweep runs them)."""

    def __init__(self, path: str = "", rank: int = 0):
        spec = os.environ.get("FAULT", "")
        job = os.environ.get("FAULT_JOB")
        if job is not None and job != _job_num():
            spec = ""
        kind, _, where = spec.partition("@")
        stage, step, *batch = where.split(":") if where else ("train", "-1")
        super().__init__(
            int(step), kind or "none", rank, stage, int(batch[0]) if batch else 0, path
        )


def _job_num() -> str | None:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return None
    return str(OmegaConf.select(HydraConfig.get(), "job.num", default=None))


class OtherTaskData:
    """A datamodule of another task, to test the model/data mismatch message."""

    kind = "other_task"

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class Trace(Callback):
    """Appends one line per training batch to `path`: step, hashes of the RNG state, the
    batch and the weights. Two runs' traces show the first step where they differ."""

    def __init__(self, path: str):
        self.path = path

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        import hashlib

        def digest(t: torch.Tensor) -> str:
            return hashlib.sha1(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:10]

        weights = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
        with open(self.path, "a") as f:
            f.write(
                f"{trainer.global_step} {batch_idx} rng={digest(torch.get_rng_state())} "
                f"x={digest(batch[0])} w={digest(weights)}\n"
            )


class Exporter:
    """A future config node whose keys once tripped rules by key name (`mode: dynamic`,
    `client_fraction: 1.0`): validation must follow its signature only."""

    def __init__(self, mode: str = "static", client_fraction: float = 0.5):
        self.mode, self.client_fraction = mode, client_fraction


class BrokenData:
    """A datamodule that fails while it is built, with a plain exception."""

    kind = "image_classification"

    def __init__(self, **kwargs):
        raise ValueError("the disk said no")
