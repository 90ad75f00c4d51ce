"""`hydra/launcher=parallel hydra.launcher.n_jobs=N`: N jobs of a sweep at once on this machine,
each in an interpreter of its own with its own GPUs (CUDA_VISIBLE_DEVICES), its share of the
cores (threads) and its own DDP port (litlab.sweeps.parallel_slots).

Why not hydra/launcher=joblib: loky's workers are reused from job to job and started before
any job is known, so a job cannot get its own CUDA_VISIBLE_DEVICES (CUDA reads it once per
process), a DDP job's ranks re-run loky's worker instead of the job, and Ctrl-C kills the
workers without the job's own stop (last.ckpt). Here each job is a process of its own
(`parallel_job`: forked from this one for CPU jobs, which then skip the imports of torch and
Lightning; a fresh interpreter for GPU jobs; see `forked`), started in a session of its own
so that the launcher alone decides what reaches it: Ctrl-C or SIGTERM of the launcher is
passed on once to every running job (a job stops as it would in a sequential sweep:
last.ckpt), no job starts after it, and the launcher exits as a stopped sequential sweep does
(1 after Ctrl-C, 143 after SIGTERM).

Jobs run the code the sweep started with (litlab.utils.code_state, as the SLURM launchers): a
job that starts an hour later imports src/ and composes configs/ again, and would otherwise
pick up edits made meanwhile. Each job writes its own run dir (`console.log`: what it
printed); the console gets one line per job start and end. The JobReturns (with each failure)
go back to the sweeper in the order of the jobs, as Hydra's basic launcher returns them.
"""

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, filter_overrides
from hydra.plugins.launcher import Launcher

log = logging.getLogger(__name__)
EXIT_AFTER = {signal.SIGINT: 1, signal.SIGTERM: 128 + signal.SIGTERM}  # as a sequential stop


@dataclass
class _Running:
    proc: subprocess.Popen
    num: int
    overrides: list[str]
    job_file: Path
    port: int
    started: float = field(default_factory=time.time)
    signals_sent: int = 0


class ParallelLauncher(Launcher):
    def __init__(self, n_jobs: Any = 2, gpus_per_job: Any = "auto") -> None:
        self.n_jobs, self.gpus_per_job = n_jobs, gpus_per_job
        self.slots: list = []
        self.code: Path | None = None
        self.threads_at_setup = 0  # this process's threads once set up (forked.can_fork)
        self.stops: list[int] = []  # signals received, in order
        self.running: dict[int, _Running] = {}  # slot index -> its job
        self.names: dict[int, list[str]] = {}  # job -> the overrides that tell it apart

    def setup(self, *, hydra_context, task_function, config) -> None:
        """Check the settings against this machine before anything is written: one line, exit 2
        (litlab.cli prints it as `error: ...`)."""
        from omegaconf import OmegaConf

        from litlab.errors import UserError
        from litlab.runs import sweep_dir as launcher_check

        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config
        given = OmegaConf.create({"n_jobs": self.n_jobs, "gpus_per_job": self.gpus_per_job})
        try:  # checked already when the sweep started (launcher_check): this plans the slots
            self.slots = launcher_check.slots(given)
        except UserError as err:
            print(str(err), file=sys.stderr)
            raise SystemExit(2) from None
        from hydra_plugins.litlab_launchers import forked

        self.threads_at_setup = forked.prepare()

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        import tempfile

        from litlab import cli, environment

        cli.run_started()  # the console is the user's now: a stop's exit code is not bad input
        environment.freeze_imports()  # before the forks: no job's collector scans (copies) them
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self._snapshot(sweep_dir)
        log.info(
            "parallel launcher: %d jobs, %d at once (%s each), in %s",
            len(job_overrides),
            len(self.slots),
            self.slots[0].describe(),
            sweep_dir,
        )
        pending = [(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
        shared = set.intersection(*(set(o) for _, o in pending)) if len(pending) > 1 else set()
        self.names = {
            num: [o for o in filter_overrides(o) if o not in shared] for num, o in pending
        }
        returns: dict[int, JobReturn] = {}
        with tempfile.TemporaryDirectory(prefix="litlab-parallel-") as tmp:
            previous = {s: signal.signal(s, self._on_stop) for s in EXIT_AFTER}
            try:
                self._run_all(pending, returns, Path(tmp))
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        if self.stops:
            raise SystemExit(EXIT_AFTER[self.stops[0]])
        return [returns[num] for num, _ in pending]

    def _snapshot(self, sweep_dir: Path) -> None:
        """Once per sweep: the Optuna sweeper launches batch after batch into one sweep dir."""
        from litlab.runs.run_dir import stop_on_error
        from litlab.utils import code_state as snapshot

        if self.code is None:  # a snapshot in the sweep dir not as litlab wrote it: exit 2
            stop_on_error(lambda: setattr(self, "code", snapshot.take(sweep_dir)))
            snapshot.use(self.code, self.hydra_context.config_loader)

    def _run_all(self, pending: list, returns: dict, tmp: Path) -> None:
        """Start jobs in free slots until every job ended, or a stop ended the running ones."""
        queue = list(pending)
        try:
            while queue and not self.stops or self.running:
                for slot in self.slots:
                    if queue and not self.stops and slot.index not in self.running:
                        num, overrides = queue.pop(0)
                        self._start(slot, num, overrides, tmp)
                time.sleep(0.1)
                for index, run in list(self.running.items()):
                    if run.proc.poll() is not None:
                        del self.running[index]
                        returns[run.num] = self._finish(run)
        except BaseException:  # the launcher itself failed: no job outlives it
            self._on_stop(signal.SIGTERM, None)
            for run in self.running.values():
                run.proc.wait()
            raise

    def _start(self, slot, num: int, overrides: list[str], tmp: Path) -> None:
        from hydra.core.singleton import Singleton

        from hydra_plugins.litlab_launchers import forked
        from hydra_plugins.litlab_launchers.parallel_job import Job, run
        from litlab.sweeps.parallel_slots import free_port

        job_file = tmp / f"job{num}"
        job = Job(
            self.hydra_context,
            self.task_function,
            self.config,
            overrides,
            num,
            Singleton.get_state(),
            run_dir_file=f"{job_file}.dir",
        )
        port = free_port({r.port for r in self.running.values()})
        env, output = slot.env(port), Path(f"{job_file}.out")  # until the job knows its run dir
        fork = forked.can_fork(self.slots, self.threads_at_setup)
        if fork:
            launcher = os.getpid()
            proc = forked.start(lambda: run(job, job_file, launcher), env, output, self.code)
        else:
            proc = self._start_interpreter(job, job_file, env, output)
        self.running[slot.index] = _Running(proc, num, overrides, job_file, port)
        self._forward_stops()  # a stop that came while it started
        what = " ".join(self.names.get(num) or filter_overrides(overrides)) or "(no overrides)"
        how = ", forked" if fork else ""
        log.info("job #%d started: %s (%s%s)", num, what, slot.describe(), how)

    @staticmethod
    def _start_interpreter(job, job_file: Path, env: dict, output: Path) -> subprocess.Popen:
        import cloudpickle

        job_file.write_bytes(cloudpickle.dumps(job))
        with open(output, "wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "hydra_plugins.litlab_launchers.parallel_job",
                 str(job_file), str(os.getpid())],
                env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def _finish(self, run: _Running) -> JobReturn:
        """The job's JobReturn, or a failed one that says how it ended and where its output is."""
        import cloudpickle
        from hydra.core.utils import JobStatus

        from hydra_plugins.litlab_launchers.parallel_job import CONSOLE_LOG, result_file
        from litlab.compat.hydra import job_outcome
        from litlab.errors import one_line

        took = f"{time.time() - run.started:.1f} s"
        run_dir_file = Path(f"{run.job_file}.dir")
        output = Path(f"{run.job_file}.out")
        if run_dir_file.is_file():
            output = Path(run_dir_file.read_text(), CONSOLE_LOG)
        result = result_file(run.job_file)
        if result.is_file():
            ret = cloudpickle.loads(result.read_bytes())
        else:  # killed, stopped, or it failed before Hydra ran it
            ret = JobReturn(overrides=run.overrides, status=JobStatus.FAILED)
            ret.return_value = RuntimeError(
                f"job #{run.num} ended with exit code {run.proc.returncode} before it "
                f"returned; its last line: {_last_line(output)}"
            )
        if ret.status == JobStatus.COMPLETED:
            log.info("job #%d completed in %s: %s", run.num, took, output.parent)
        else:
            err = one_line(job_outcome(ret), with_type=True, limit=300)
            log.info("job #%d failed in %s: %s (its output: %s)", run.num, took, err, output)
        return ret

    def _on_stop(self, signum, frame) -> None:
        if not self.stops:
            log.warning(
                "%s: stopping the %d running jobs (each saves last.ckpt); no new job starts",
                signal.Signals(signum).name,
                len(self.running),
            )
        self.stops.append(signum)
        self._forward_stops()

    def _forward_stops(self) -> None:
        """Each stop once to each running job: Ctrl-C to its process group (as a terminal sends
        it: the job's DDP ranks too), SIGTERM to the job's process (as `kill` sends it)."""
        for run in self.running.values():
            while run.signals_sent < len(self.stops):
                signum = self.stops[run.signals_sent]
                run.signals_sent += 1
                try:
                    if signum == signal.SIGINT:
                        os.killpg(run.proc.pid, signum)
                    else:
                        run.proc.send_signal(signum)
                except ProcessLookupError:  # it has just ended
                    pass


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    return lines[-1].strip()[:300] if lines else "(no output)"
