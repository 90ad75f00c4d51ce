"""What each job of `hydra/launcher=parallel` may use: its GPUs, its share of the cores, its
DDP port. Pure functions of the settings and of the machine's devices (passed in), so that the
GPU rules are tested on a machine without GPUs.

Why the launcher splits them itself: N jobs that each see every GPU all start on GPU 0, and N
jobs that each start one torch thread per core fight for the same cores (a thread waiting for
its core holds every parallel op back: litlab.threads). A slot is one place a job runs in; a
job takes a free slot and gives it back when it ends, so a slot's GPUs are never shared.
"""

import socket
from dataclasses import dataclass

from litlab.errors import UserError

AUTO = "auto"


@dataclass(frozen=True)
class Slot:
    index: int
    # CUDA_VISIBLE_DEVICES of the job; None: the machine has no GPU, leave it as it is
    gpus: tuple[str, ...] | None
    cores: int  # CPU threads of the job, split between its own DDP processes

    def env(self, port: int) -> dict[str, str]:
        """The job's environment on top of the launcher's own."""
        from litlab.threads import JOB_CORES

        env = {JOB_CORES: str(self.cores), "MASTER_PORT": str(port)}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        return env

    def describe(self) -> str:
        gpus = "" if self.gpus is None else f", GPUs {','.join(self.gpus) or 'none'}"
        return f"{self.cores} core{'s' if self.cores != 1 else ''}{gpus}"


def _whole(value, name: str, least: int, what: str) -> int:
    text = str(value).strip()
    count = int(text) if not isinstance(value, bool) and text.isdigit() and len(text) < 7 else -1
    if count < least:
        raise UserError(f"hydra.launcher.{name}={value} is not valid; {what}")
    return count


def check_settings(n_jobs, gpus_per_job) -> tuple[int, int | None]:
    """(jobs at once, GPUs per job or None for auto), or one line saying what is valid."""
    jobs = _whole(
        n_jobs,
        "n_jobs",
        1,
        "use the number of jobs to run at once, a whole number >= 1 (e.g. hydra.launcher.n_jobs=2)",
    )
    if gpus_per_job is None or str(gpus_per_job).strip().lower() == AUTO:
        return jobs, None
    gpus = _whole(
        gpus_per_job,
        "gpus_per_job",
        0,
        "use auto (1 on a GPU machine, 0 on the CPU) or a "
        "whole number >= 0 (0: jobs run on the CPU; 2 for trainer=ddp trainer.devices=2)",
    )
    return jobs, gpus


def visible_gpus(count: int, cuda_visible_devices: str | None) -> list[str]:
    """The GPUs this process may hand out, by the names its own CUDA_VISIBLE_DEVICES gives
    them (a job's CUDA_VISIBLE_DEVICES must name the same physical devices)."""
    if cuda_visible_devices is None:
        return [str(i) for i in range(count)]
    names = [d.strip() for d in cuda_visible_devices.split(",") if d.strip()]
    return names[:count]


def plan(n_jobs, gpus_per_job, gpus: list[str], free_cores: int) -> list[Slot]:
    """One slot per job at once: disjoint GPUs (`gpus_per_job` each), cores split evenly.
    More jobs than the GPUs allow is refused before anything runs."""
    jobs, per_job = check_settings(n_jobs, gpus_per_job)
    if per_job is None:
        per_job = 1 if gpus else 0
    if jobs * per_job > len(gpus):
        have = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
        most = len(gpus) // per_job
        instead = f"hydra.launcher.n_jobs={most}" if most else "hydra.launcher.gpus_per_job=0"
        raise UserError(
            f"hydra.launcher.n_jobs={jobs} with gpus_per_job={per_job} needs {jobs * per_job} "
            f"GPUs, one set per job, and this machine has {have}; use {instead} (jobs wait "
            f"for a free GPU set)"
        )
    cores = max(1, free_cores // jobs)
    own = [tuple(gpus[i * per_job : (i + 1) * per_job]) if gpus else None for i in range(jobs)]
    return [Slot(index=i, gpus=own[i], cores=cores) for i in range(jobs)]


def free_port(taken: set[int]) -> int:
    """A TCP port free now and not handed to another running job (each DDP job meets its own
    ranks at MASTER_PORT: two jobs on one port would join each other's rendezvous)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port not in taken:
            return port
    raise OSError("no free TCP port for the job's DDP rendezvous")
