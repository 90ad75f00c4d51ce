"""One job of `hydra/launcher=parallel`, forked from the launcher (CPU jobs: `forked`) or in an
interpreter of its own:

    python -m hydra_plugins.litlab_launchers.parallel_job JOB_FILE LAUNCHER_PID

JOB_FILE holds the job (`Job`, pickled by the launcher with cloudpickle: the task function lives
in the entry script's __main__); its JobReturn goes to JOB_FILE.result, written whole or not at
all. Its console output goes to `<run dir>/console.log` as soon as the run dir is known (the
launcher's console gets one line per job start and end, not N jobs' lines interleaved).
If the launcher dies without stopping it (SIGKILL), the job stops as on SIGTERM (last.ckpt).
"""

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONSOLE_LOG = "console.log"  # in the job's run dir: what the job printed


@dataclass
class Job:
    """What `run_job` needs in the job's process (as submitit's launchers pass it)."""

    hydra_context: Any
    task_function: Any
    config: Any
    overrides: list[str]
    num: int
    singleton_state: Any
    run_dir_file: str  # where the job writes its run dir for the launcher

    def __call__(self):
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.singleton import Singleton
        from hydra.core.utils import run_job, setup_globals
        from omegaconf import OmegaConf, open_dict

        Singleton.set_state(self.singleton_state)
        setup_globals()
        config = self.hydra_context.config_loader.load_sweep_config(self.config, self.overrides)
        with open_dict(config.hydra.job):
            config.hydra.job.id = f"{self.num}"
            config.hydra.job.num = self.num
        HydraConfig.instance().set_config(config)  # as run_job does: the subdir may name the job
        sweep_dir = str(OmegaConf.select(config, "hydra.sweep.dir"))
        out = Path(sweep_dir, str(OmegaConf.select(config, "hydra.sweep.subdir")))
        Path(self.run_dir_file).write_text(str(out))
        console_to(out / CONSOLE_LOG)
        return run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )


def console_to(path: Path) -> None:
    """Send this process's stdout and stderr (and its DDP ranks') to `path`, appended."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _stop_when_orphaned(launcher_pid: int) -> None:
    """SIGTERM to this job once its launcher is gone: it saves last.ckpt and ends."""

    def watch():
        while os.getppid() == launcher_pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="litlab-launcher-watch").start()


def _result_bytes(job_return) -> bytes:
    """The pickled JobReturn; an unpicklable return value or error becomes a failure that says
    what it was (the sweeper gets no objective it could not read back)."""
    import cloudpickle
    from hydra.core.utils import JobStatus

    try:
        return cloudpickle.dumps(job_return)
    except Exception as err:  # noqa: BLE001  (what the task returned cannot travel back)
        from litlab.compat.hydra import job_outcome
        from litlab.errors import one_line

        what = "result" if job_return.status == JobStatus.COMPLETED else "error"
        outcome = one_line(job_outcome(job_return), with_type=True, limit=300)
        job_return.status = JobStatus.FAILED
        job_return.return_value = RuntimeError(
            f"the job's {what} {outcome} cannot be sent back: {one_line(err)}"
        )
        return cloudpickle.dumps(job_return)


def result_file(job_file: Path) -> Path:
    return job_file.with_name(job_file.name + ".result")


def run(job: Job, job_file: Path, launcher_pid: int) -> None:
    """Run the job in this process (a fresh interpreter, or a child forked from the launcher);
    its JobReturn goes to JOB_FILE.result, whole or not at all."""
    _stop_when_orphaned(launcher_pid)
    data = _result_bytes(job())
    result = result_file(job_file)
    partial = result.with_name(result.name + ".partial")
    partial.write_bytes(data)
    partial.replace(result)


def main() -> None:
    import cloudpickle

    job_file, launcher_pid = Path(sys.argv[1]), int(sys.argv[2])
    run(cloudpickle.loads(job_file.read_bytes()), job_file, launcher_pid)


if __name__ == "__main__":
    main()
