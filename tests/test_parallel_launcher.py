"""`hydra/launcher=parallel`: what each job gets (GPUs, cores, DDP port) on fake machines, and
the settings it refuses: one line, exit 2, nothing written, before any job is composed. The
sweeps it runs (same metrics as one process, a stop, DDP jobs, a failed job) are in
tests/test_launchers.py and below, marked slow."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.ddp import PROBE, TINY, probe_env
from helpers.runs import QUIET, ROOT

from litlab import threads
from litlab.errors import UserError
from litlab.sweeps.parallel_slots import check_settings, free_port, plan, visible_gpus

GPUS4 = ["0", "1", "2", "3"]


def test_each_job_gets_its_own_gpus_and_its_share_of_the_cores():
    slots = plan(2, "auto", GPUS4, free_cores=16)
    assert [s.gpus for s in slots] == [("0",), ("1",)]  # auto: one GPU per job
    assert [s.cores for s in slots] == [8, 8]
    assert [s.gpus for s in plan(2, 2, GPUS4, 16)] == [("0", "1"), ("2", "3")]  # ddp x2 each
    env = plan(2, 2, GPUS4, 16)[1].env(port=29511)
    assert env == {threads.JOB_CORES: "8", "MASTER_PORT": "29511", "CUDA_VISIBLE_DEVICES": "2,3"}
    # the launcher's own CUDA_VISIBLE_DEVICES names the physical devices the jobs get
    assert visible_gpus(3, "3,5,7") == ["3", "5", "7"]
    assert [s.gpus for s in plan(3, "auto", visible_gpus(3, "3,5,7"), 2)] == [
        ("3",),
        ("5",),
        ("7",),
    ]
    assert [s.cores for s in plan(3, "auto", GPUS4, free_cores=2)] == [1, 1, 1]  # never 0


def test_cpu_jobs_leave_or_hide_the_gpus():
    cpu = plan(2, "auto", [], free_cores=2)
    assert [s.gpus for s in cpu] == [None, None] and "CUDA_VISIBLE_DEVICES" not in cpu[0].env(1)
    hidden = plan(2, 0, GPUS4, free_cores=2)  # gpus_per_job=0 on a GPU machine: CPU jobs
    assert hidden[0].env(1)["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(
    ("n_jobs", "per_job", "gpus", "expected"),
    [
        (
            3,
            "auto",
            ["0", "1"],
            (
                "n_jobs=3 with gpus_per_job=1 needs 3 GPUs, one set per job, "
                "and this machine has 2 GPUs; use hydra.launcher.n_jobs=2"
            ),
        ),
        (
            2,
            2,
            ["0", "1", "2"],
            (
                "needs 4 GPUs, one set per job, and this machine has 3 GPUs; "
                "use hydra.launcher.n_jobs=1"
            ),
        ),
        (
            1,
            1,
            [],
            (
                "needs 1 GPUs, one set per job, and this machine has 0 GPUs; use "
                "hydra.launcher.gpus_per_job=0"
            ),
        ),
        (2, 4, ["0", "1"], "this machine has 2 GPUs; use hydra.launcher.gpus_per_job=0"),
    ],
)
def test_more_jobs_than_gpus_is_refused(n_jobs, per_job, gpus, expected):
    with pytest.raises(UserError, match=expected.replace("(", r"\(")) as caught:
        plan(n_jobs, per_job, gpus, free_cores=8)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("bad", [0, -1, "-3", 1.5, "two", True, "", None, 10**9])
def test_n_jobs_must_be_a_whole_number_from_1(bad):
    with pytest.raises(UserError, match=rf"hydra.launcher.n_jobs={bad} is not valid; use the "):
        check_settings(bad, "auto")


@pytest.mark.parametrize("bad", [-1, 0.5, "many", False])
def test_gpus_per_job_is_auto_or_a_whole_number(bad):
    with pytest.raises(UserError, match=rf"gpus_per_job={bad} is not valid; use auto \("):
        check_settings(2, bad)
    assert check_settings("3", "AUTO") == (3, None) and check_settings(1, "0") == (1, 0)


def test_a_job_splits_its_share_between_its_processes(monkeypatch):
    """threads=auto in a parallel job: the launcher's share, split between the job's DDP
    processes (not the load, which is its siblings'); OMP_NUM_THREADS still wins."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(threads.JOB_CORES, "8")
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert threads.choose("auto") == 8 and threads.choose("auto", processes=2) == 4
    assert threads.choose("auto", processes=16) == 1 and threads.choose(1) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads.choose("auto") == 2


def test_a_parallel_sweep_looks_at_the_machines_cores_once(monkeypatch):
    """The check before anything runs refuses on the settings and GPUs alone; only the
    launcher's setup asks which cores are free (a look of 0.2 s where the load is high)."""
    from omegaconf import OmegaConf

    from litlab.runs import sweep_dir

    looks = []
    monkeypatch.setattr(threads, "free_cores", lambda processes=1: looks.append(1) or 2)
    launcher = {"_target_": sweep_dir.PARALLEL, "n_jobs": 2, "gpus_per_job": "auto"}
    sweep_dir.check_launcher(OmegaConf.create({"hydra": {"launcher": launcher}}))
    assert looks == []
    with pytest.raises(UserError, match="hydra.launcher.n_jobs=0 is not valid"):
        bad = {**launcher, "n_jobs": 0}
        sweep_dir.check_launcher(OmegaConf.create({"hydra": {"launcher": bad}}))
    assert [s.cores for s in sweep_dir.slots(OmegaConf.create(launcher))] == [1, 1]
    assert looks == [1]


def test_running_jobs_get_distinct_ports():
    taken: set[int] = set()
    for _ in range(5):
        taken.add(free_port(taken))
    assert len(taken) == 5


def _cli(*overrides: str, log_dir, **kw):
    cmd = [sys.executable, "src/train.py", "-m", "hydra/launcher=parallel", *QUIET]
    cmd += [*overrides, f"paths.log_dir={log_dir}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **probe_env()}
    return cmd, {"cwd": ROOT, "env": env, "text": True, **kw}


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "hydra.launcher.n_jobs=0",
            (
                "error: hydra.launcher.n_jobs=0 is not valid; use the number "
                "of jobs to run at once, a whole number >= 1 (e.g. hydra.launcher.n_jobs=2)"
            ),
        ),
        (
            "hydra.launcher.gpus_per_job=1",
            (
                "error: hydra.launcher.n_jobs=2 with gpus_per_job=1 "
                "needs 2 GPUs, one set per job, and this machine has 0 GPUs; use "
                "hydra.launcher.gpus_per_job=0 (jobs wait for a free GPU set)"
            ),
        ),
    ],
)
def test_refused_in_one_line_before_anything_runs(setting, expected, tmp_path):
    """As a user types it: exit 2, the one line, no sweep dir, and fast: the launcher's
    settings are checked before every job of the sweep is composed and checked (which imports
    torch), so its line comes first even though job 1 (seed=-5) is bad too."""
    if setting.endswith("gpus_per_job=1") and _has_gpu():
        pytest.skip("this machine has a GPU")
    cmd, kw = _cli(setting, "seed=1,-5", log_dir=tmp_path / "logs", capture_output=True)
    started = time.perf_counter()
    proc = subprocess.run(cmd, timeout=120, **kw)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == expected
    assert not (tmp_path / "logs").exists()
    assert time.perf_counter() - started < 30


def _has_gpu() -> bool:
    from litlab.config.resolvers import certainly_no_gpu

    return not certainly_no_gpu()


def _probes(folder) -> list[dict]:
    return [json.loads(p.read_text()) for p in folder.glob("*.json")] if folder.is_dir() else []


def _wait_for(what, timeout: float = 400):
    deadline = time.time() + timeout
    while not what():
        assert time.time() < deadline, "timed out"
        time.sleep(0.5)


def _summary(sweep) -> list[dict]:
    with open(sweep / "summary.csv") as f:
        return list(csv.DictReader(f))


LONG = [
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.num_sanity_val_steps=0",
]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 1)])
def test_a_stop_reaches_every_running_job_and_starts_no_more(signum, code, tmp_path):
    """Ctrl-C or SIGTERM of the launcher while 2 of 3 jobs train: each running job stops as in
    a sequential sweep (its stop handling saves last.ckpt and failed.json), the third never
    starts, no job process is left, and the launcher exits as a stopped sweep does."""
    probes, out = tmp_path / "probes", tmp_path / "console.txt"
    cmd, kw = _cli(
        "hydra.launcher.n_jobs=2", "seed=1,2,3", "trainer.max_epochs=1000", *LONG, *PROBE,
        f"+callbacks.rank_probe.out={probes}", log_dir=tmp_path / "logs",
    )  # fmt: skip
    with open(out, "w") as console:
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, **kw)
        try:
            _wait_for(lambda: len(_probes(probes)) == 2)
            time.sleep(1.0)
            proc.send_signal(signum)
            assert proc.wait(timeout=300) == code, out.read_text()[-3000:]
        finally:
            proc.kill()
    text = out.read_text()
    assert f"{signal.Signals(signum).name}: stopping the 2 running jobs" in text
    [sweep] = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    for job in ("0", "1"):
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()
        assert json.loads((sweep / job / "failed.json").read_text())
    assert not (sweep / "2").exists() and "job #2" not in text
    for record in _probes(probes):
        with pytest.raises(ProcessLookupError):
            os.kill(record["pid"], 0)
    # the two stopped jobs resume from their last.ckpt; the third is in the plan, never started
    assert [r["status"] for r in _summary(sweep)] == ["incomplete", "incomplete", "not started"]


@pytest.mark.slow
def test_a_killed_job_fails_alone(tmp_path):
    """A job killed from outside (SIGKILL: it returns nothing) is a failed job with the
    reason; the other job finishes; the sweep ends as one with a failed job (exit 1)."""
    probes, out = tmp_path / "probes", tmp_path / "console.txt"
    cmd, kw = _cli(
        "hydra.launcher.n_jobs=2", "trainer.max_epochs=1000,2", *LONG, *PROBE,
        f"+callbacks.rank_probe.out={probes}", log_dir=tmp_path / "logs",
    )  # fmt: skip
    with open(out, "w") as console:
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, **kw)
        try:
            _wait_for(lambda: any(r["root_dir"].endswith("/0") for r in _probes(probes)))
            [first] = [r for r in _probes(probes) if r["root_dir"].endswith("/0")]
            os.kill(first["pid"], signal.SIGKILL)
            assert proc.wait(timeout=400) == 1, out.read_text()[-3000:]
        finally:
            proc.kill()
    text = out.read_text()
    assert "job #0 failed in " in text and "ended with exit code -9 before it returned" in text
    assert "job #1 completed in " in text
    [sweep] = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    # its record said `running`: the launcher's line makes it a failed job, listed at the end
    assert [r["status"] for r in _summary(sweep)] == ["failed", "completed"]
    failures = text.split("1 failed job(s):\n", 1)[1].splitlines()
    assert failures[0].startswith("job 0 (trainer.max_epochs=1000): RuntimeError: job #0 ended")


@pytest.mark.slow
def test_ddp_jobs_run_at_once_each_with_its_own_port(tmp_path):
    """trainer=ddp jobs (2 CPU processes each, gloo), 2 at once: each job's ranks meet on a
    port of their own, and both jobs complete."""
    from helpers.runs import run_cli

    probes = tmp_path / "probes"
    run_cli(
        "train.py", "hydra.mode=MULTIRUN", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2",
        "trainer=ddp", "model.optimizer.lr=0.01,0.1", *TINY, *PROBE,
        f"+callbacks.rank_probe.out={probes}", log_dir=tmp_path / "logs", env=probe_env(),
        timeout=600,
    )  # fmt: skip
    jobs: dict[str, list[dict]] = {}
    for record in _probes(probes):
        jobs.setdefault(record["root_dir"], []).append(record)
    assert len(jobs) == 2
    ports = set()
    for ranks in jobs.values():
        assert sorted(r["rank"] for r in ranks) == [0, 1] and ranks[0]["world_size"] == 2
        assert len({r["master_port"] for r in ranks}) == 1
        ports.add(ranks[0]["master_port"])
    assert len(ports) == 2
    [sweep] = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    assert [r["status"] for r in _summary(sweep)] == ["completed", "completed"]


def _gone(pid: int) -> bool:
    """Ended (a zombie left to a parent that does not reap it counts as ended)."""
    try:
        proc = Path(f"/proc/{pid}/status")
        status = proc.read_text() if Path("/proc").is_dir() else ""
        os.kill(pid, 0)
    except (ProcessLookupError, FileNotFoundError):
        return True
    return "\nState:\tZ" in status


@pytest.mark.slow
def test_jobs_of_a_killed_launcher_stop_by_themselves(tmp_path):
    """SIGKILL of the launcher (it can pass nothing on): each running job notices, stops as on
    SIGTERM (last.ckpt, failed.json), and no job process is left behind."""
    probes = tmp_path / "probes"
    cmd, kw = _cli(
        "hydra.launcher.n_jobs=2", "seed=1,2", "trainer.max_epochs=1000", *LONG, *PROBE,
        f"+callbacks.rank_probe.out={probes}", log_dir=tmp_path / "logs",
    )  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    try:
        _wait_for(lambda: len(_probes(probes)) == 2)
    finally:
        proc.kill()
        proc.wait()
    pids = [r["pid"] for r in _probes(probes)]
    _wait_for(lambda: all(_gone(pid) for pid in pids), timeout=300)
    [sweep] = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    for job in ("0", "1"):
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()
        assert "stopped (exit code 143)" in (sweep / job / "failed.json").read_text()


def test_a_result_that_cannot_travel_back_is_a_failure_that_says_so():
    """A job whose return value cannot be pickled: the launcher gets a failed JobReturn naming
    it, not a crash of the job after its work was done."""
    import threading

    import cloudpickle
    from hydra.core.utils import JobReturn, JobStatus

    from hydra_plugins.litlab_launchers.parallel_job import _result_bytes

    ret = JobReturn(status=JobStatus.COMPLETED)
    ret.return_value = threading.Lock()
    back = cloudpickle.loads(_result_bytes(ret))
    assert back.status == JobStatus.FAILED
    with pytest.raises(RuntimeError, match=r"the job's result lock: .* cannot be sent back: "):
        _ = back.return_value


def test_a_launcher_that_fails_stops_the_jobs_it_started(tmp_path):
    """The launcher cannot start job 1 (e.g. no more processes): job 0, already running, is
    stopped (SIGTERM: it saves last.ckpt) and waited for, and the error goes on to the user."""
    from hydra_plugins.litlab_launchers import parallel

    launcher = parallel.ParallelLauncher(n_jobs=2)
    launcher.slots = plan(2, "auto", [], free_cores=2)
    started = []

    def start(slot, num, overrides, tmp):
        if num == 1:
            raise OSError("cannot start a process")
        code = "import time; time.sleep(120)"
        proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        launcher.running[slot.index] = parallel._Running(proc, num, overrides, tmp / "j", 1)
        started.append(proc)

    launcher._start = start
    with pytest.raises(OSError, match="cannot start a process"):
        launcher._run_all([(0, ["seed=1"]), (1, ["seed=2"])], {}, tmp_path)
    [proc] = started
    assert proc.returncode == -signal.SIGTERM


FORK_CHECK = """
import sys, threading
from hydra_plugins.litlab_launchers import forked
from litlab.sweeps.parallel_slots import plan
cpu, gpu = plan(2, "auto", [], free_cores=2), plan(2, "auto", ["0", "1"], free_cores=2)
forked.PRELOAD = ("torch",)  # the rest only takes time here
at_setup = forked.prepare()
import torch
print(torch.get_num_threads(), forked.can_fork(cpu, at_setup), forked.can_fork(gpu, at_setup))
threading.Thread(target=threading.Event().wait, daemon=True).start()
print(forked.can_fork(cpu, at_setup))
"""


def test_cpu_jobs_are_forked_only_from_a_launcher_without_new_threads():
    """A launcher with only the threads it had when set up forks its CPU jobs (its torch runs one
    thread: no OpenMP pool to inherit); GPU jobs, or a launcher that started a thread since,
    get fresh interpreters."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_CHECK], capture_output=True, text=True, timeout=120,
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "True", "False", "False"]


def test_a_forked_job_imports_the_sweeps_code_snapshot(tmp_path):
    """After `snapshot.import_from`, a module the launcher had not imported comes from the
    snapshot (also through an already imported package), and provenance names the snapshot."""
    script = f"""
import litlab.utils.code_state as snapshot, litlab.sweeps
from litlab.utils.code_state import code_state
code = snapshot.take({str(tmp_path)!r})
assert "litlab.sweeps.summary_stats" not in __import__("sys").modules
snapshot.import_from(code)
import litlab.sweeps.summary_stats as late
print(late.__file__)
print(code_state()["snapshot"])
print(code)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    late, recorded, code = done.stdout.split()
    assert late == f"{code}/src/litlab/sweeps/summary_stats.py"
    assert recorded == code
