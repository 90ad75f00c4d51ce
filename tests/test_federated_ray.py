"""Federated runs as a user starts them (`python src/federate.py`, Flower's Ray simulation):
faults, signals, kill -9 and resume, and that no process of a run outlives it. All slow: Ray
takes a minute or more to start on a busy 2-core machine. Every process of a run carries an
environment marker (Ray's workers inherit it), which is how leftovers are found."""

import contextlib
import csv
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid

import pytest
import torch
from helpers.runs import ROOT, python_c

pytestmark = pytest.mark.slow
SHORT = ["federate.num_clients=2", "trainer.limit_train_batches=3", "extras.print_config=false"]


def _marked(marker: str) -> list:
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("LITLAB_TEST_MARKER") == marker:
                found.append(p.cmdline())
        except psutil.Error:
            continue
    return found


def _none_left_within(marker: str, seconds: float) -> list:
    """The marked processes still alive after `seconds` (polled: [] as soon as none is)."""
    deadline = time.time() + seconds
    while (left := _marked(marker)) and time.time() < deadline:
        time.sleep(1)
    return left


def _start(log_dir, *overrides, marker):
    env = {**os.environ, "LITLAB_TEST_MARKER": marker, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "src/federate.py", f"paths.log_dir={log_dir}", *overrides]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _run_marked(tmp_path, *overrides, timeout=900, flags=()):
    """Run federate.py to its end; return (proc, leftovers)."""
    marker = uuid.uuid4().hex
    env = {**os.environ, "LITLAB_TEST_MARKER": marker, "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable,
        "src/federate.py",
        *flags,
        f"paths.log_dir={tmp_path / 'logs'}",
        "extras.print_config=false",
        *overrides,
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    return proc, _none_left_within(marker, 30)


def _wait_for(proc, pattern: str, tree=None) -> str:
    """The output up to the first line matching `pattern`; `tree` (Descendants) notes the
    driver's processes at every line."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if tree is not None:
            tree.seen()
        if re.search(pattern, line):
            if tree is not None:
                tree.seen()
            return "".join(seen)
    raise AssertionError(f"no line matched {pattern!r}:\n{''.join(seen)[-3000:]}")


def _history(run_dir):
    with open(run_dir / "history.csv") as f:
        return list(csv.DictReader(f))


def test_sigterm_saves_the_finished_rounds_and_the_printed_resume_finishes_the_same_run(
    tmp_path, capfd, monkeypatch
):
    """SIGTERM while round 3 of 4 trains: exit 143, rounds 0-2 on disk, no process of the run
    30 s later; the resume command it prints, as printed (no override repeated), finishes it
    with the final accuracy (and weights) of a run that was never stopped. The stop is what
    needs Ray (one worker: the clients' parallelism is test_simulation_records_...'s); the
    resume and the never-stopped run are the same server loop and ClientApp with the clients
    called in this process (tests/helpers/federated_engine.py): the resume is federate.py's
    command line parsed in this process, and a Ray run that ends leaving no process is
    test_simulation_records_a_failing_client_...'s check."""
    marker = uuid.uuid4().hex
    one_worker = "federate.backend.init_args.num_cpus=1"
    proc = _start(tmp_path / "logs", *SHORT, "federate.rounds=4", one_worker, marker=marker)
    tree = Descendants(proc.pid)
    _wait_for(proc, r"round 2/4 ", tree)  # round 2 is saved, round 3 is training
    assert len(tree.known) > 3  # the watchdog and Ray's processes
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 143, rest[-3000:]
    assert re.search(r"interrupted \(SIGTERM\): rounds up to [23] of 4 are saved in ", rest)
    assert _none_left(marker, tree, 30) == ([], [])
    [run_dir] = (tmp_path / "logs" / "federate" / "runs").glob("*")
    assert [r["round"] for r in _history(run_dir)] in (list("012"), list("0123"))

    printed = re.search(r"resume with: python src/federate.py (.+)", rest)[1]
    words = shlex.split(printed)  # the run dir, and where this run's logs are
    assert f"ckpt_path={run_dir}" in words and any(w.startswith("paths.log_dir=") for w in words)
    resumed = _resumed_in_process(words, capfd, monkeypatch)
    assert f"resuming {run_dir}" in resumed
    whole_dir = tmp_path / "whole"
    _never_stopped(whole_dir, *SHORT, "federate.rounds=4", one_worker)
    a, b = _history(run_dir), _history(whole_dir)
    assert [r["round"] for r in a] == [str(i) for i in range(5)] == [r["round"] for r in b]
    assert a[-1]["accuracy"] == b[-1]["accuracy"]  # the same digits
    wa = torch.load(run_dir / "global.ckpt", weights_only=True)["state_dict"]
    wb = torch.load(whole_dir / "global.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def _resumed_in_process(words: list[str], capfd, monkeypatch) -> str:
    """`python src/federate.py <words>` (the printed words, none added) run to its end in this
    process, the clients called by the in-process engine: its stdout (exit 0 asserted)."""
    from helpers.federated_engine import engine
    from helpers.here import run_here

    import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)
    from litlab.federated import processes

    monkeypatch.setattr(processes, "simulate", engine())
    resumed = run_here([sys.executable, "src/federate.py", *words], capfd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return resumed.stdout


def _never_stopped(out, *overrides) -> None:
    """The run as federate.py would make it, in `out`, by the in-process engine."""
    from helpers.federated_engine import engine

    import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)
    from litlab.config.compose import compose
    from litlab.federated.federation import federate

    federate(compose("federate", list(overrides), output_dir=out), engine=engine())


def test_kill_9_of_the_driver_leaves_no_process_of_the_run(tmp_path):
    """The watchdog ends Ray's GCS, raylet, agents and worker when the driver is killed (one
    worker: Ctrl-C's check below stops a run of two)."""
    marker = uuid.uuid4().hex
    one_worker = "federate.backend.init_args.num_cpus=1"
    proc = _start(tmp_path, *SHORT, "federate.rounds=50", one_worker, marker=marker)
    _wait_for(proc, r"round 1/50 ")
    assert len(_marked(marker)) > 3  # the driver, the watchdog and Ray's processes
    proc.kill()
    proc.wait(timeout=30)
    assert _none_left_within(marker, 30) == []


def test_ctrl_c_during_the_simulation_leaves_no_process(tmp_path):
    """With federate.yaml's two Ray workers, as a user's run has them."""
    marker = uuid.uuid4().hex
    proc = _start(tmp_path, *SHORT, "federate.rounds=50", marker=marker)
    tree = Descendants(proc.pid)
    _wait_for(proc, r"round 1/50 ", tree)
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, rest[-2000:]
    assert "interrupted (SIGINT): rounds up to " in rest
    printed = re.search(r"resume with: python src/federate.py (.+)", rest)[1]
    assert any(w.startswith("ckpt_path=") for w in shlex.split(printed)), rest[-2000:]
    assert _none_left(marker, tree, 30) == ([], [])


class Descendants:
    """The driver's process tree as seen while it runs (pid -> start time): Ray's agents show
    no environment once they set their title, so the marker alone misses them."""

    def __init__(self, pid: int):
        self.pid, self.known = pid, {}

    def seen(self) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(self.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self.known.setdefault(p.pid, (p.create_time(), p.name()))

    def alive(self) -> list:
        import psutil

        left = []
        for pid, (started, name) in self.known.items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(name)
        return left


def _none_left(marker: str, tree: Descendants, seconds: float) -> tuple[list, list]:
    """What still lives `seconds` after the run ended: in the driver's tree (Ray's agents,
    re-parented to init once the driver is gone), and by the run's marker."""
    deadline = time.time() + seconds
    while (tree.alive() or _marked(marker)) and time.time() < deadline:
        time.sleep(1)
    return tree.alive(), _marked(marker)


# ~6 min each on CI's 2 cores, so `bench` (pytest -m bench): the same checks without the load
# are in the slow stage (test_sigterm_saves_..., test_ctrl_c_during_the_simulation_...)
@pytest.mark.bench
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_no_process_of_the_run_outlives_a_signal_by_30_s_on_a_loaded_machine(tmp_path, signum):
    """Two busy loops beside the run: after SIGINT (Ctrl-C) or SIGTERM nothing the run started
    lives 30 s later: not by its marker, nor in the tree seen below the driver (Ray's
    DashboardAgent and RuntimeEnvAgent lived about two minutes, re-parented to init)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        marker = uuid.uuid4().hex
        proc = _start(tmp_path, *SHORT, "federate.rounds=50", marker=marker)
        tree = Descendants(proc.pid)
        seen = []
        for line in proc.stdout:
            seen.append(line)
            tree.seen()
            if re.search(r"round 1/50 ", line):
                break
        tree.seen()
        assert len(tree.known) > 3, "".join(seen)[-3000:]  # the watchdog and Ray's processes
        proc.send_signal(signum)
        rest = proc.communicate(timeout=120)[0]
        assert proc.returncode == 128 + signum, rest[-3000:]
        assert _none_left(marker, tree, 30) == ([], [])
    finally:
        for b in busy:
            b.kill()
            b.wait()


def test_simulation_records_a_failing_client_and_leaves_no_process(tmp_path, capfd):
    """3 clients, client 2 always raises: recorded each round, the run goes on, the global
    checkpoint loads weights-only and eval.py reproduces the last round's accuracy."""
    import json

    from litlab.checkpointing.run_config import CONFIG_KEY

    proc, leftovers = _run_marked(
        tmp_path,
        "federate.num_clients=3",
        "federate.rounds=2",
        "federate.fail_clients=[2]",
        "federate.partition=iid",  # with the next line, README's command
        "federate.compression=int8",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert leftovers == []
    run_dir = next((tmp_path / "logs" / "federate" / "runs").glob("*"))
    rows = _history(run_dir)
    assert [(r["round"], r["clients"], r["failed"]) for r in rows] == [
        ("0", "0", "0"),
        ("1", "2", "1"),
        ("2", "2", "1"),
    ]
    assert rows[1]["failures"].startswith("2: injected failure")
    assert rows[2]["client_eval_clients"] == "2"  # the clients that trained evaluate
    assert float(rows[2]["accuracy"]) > float(rows[0]["accuracy"])
    assert int(rows[1]["bytes_sent"]) < 0.3 * int(rows[1]["bytes_uncompressed"])
    assert (run_dir / "history.png").is_file() and (run_dir / "client_classes.png").is_file()
    ckpt = torch.load(run_dir / "global.ckpt", weights_only=True)
    assert ckpt[CONFIG_KEY]["federate"]["num_clients"] == 3
    # eval.py in this process (its own subprocess checks: test_first_run.py and others)
    from helpers.runs import command_in_process

    code, _, err = command_in_process(
        "eval.py", [f"ckpt_path={run_dir / 'global.ckpt'}"], tmp_path / "logs", capfd
    )
    assert code == 0, err[-3000:]
    eval_dir = next((tmp_path / "logs" / "eval" / "runs").glob("*"))
    metrics = json.loads((eval_dir / "metrics.json").read_text())
    assert metrics["test/acc"] == pytest.approx(float(rows[2]["accuracy"]), abs=1e-6)


def test_a_round_without_any_successful_client_ends_the_run(tmp_path):
    """One Ray worker (the clients one at a time: what ends the run is that none succeeded,
    not how many ran at once; each worker imports torch and Lightning)."""
    proc, leftovers = _run_marked(
        tmp_path,
        "federate.num_clients=2",
        "federate.rounds=3",
        "federate.fail_clients=[0,1]",
        "federate.backend.init_args.num_cpus=1",
    )
    assert proc.returncode == 1
    [run] = (tmp_path / "logs" / "federate" / "runs").iterdir()  # kept: it holds the round-0 model
    assert re.fullmatch(
        r"error: round 1: none of the 2 sampled clients succeeded \(client "
        r"[01]: injected failure \(federate.fail_clients\)\); resume: python src/federate.py "
        rf".*ckpt_path={re.escape(str(run))}",
        proc.stderr.strip(),
    ), proc.stderr
    assert (run / "failed.json").is_file()
    assert leftovers == []


def test_a_federated_sweep_with_fedprox_and_int8_gives_the_usual_summary(tmp_path):
    """README's `-m federate.alpha=...` sweep, with FedProx and int8 updates: one job per alpha,
    both completed, in the sweep summary every multirun writes; no process left behind. One
    Ray worker a job (clients one at a time: each worker imports torch and Lightning) and 3
    batches a client: the summary is what is checked, not the clients' parallelism or scores."""
    proc, left = _run_marked(
        tmp_path,
        "federate.alpha=0.1,1.0",
        "federate/strategy=fedprox",
        "federate.strategy.proximal_mu=0.1",
        "federate.compression=int8",
        "federate.num_clients=2",
        "federate.rounds=1",
        "federate.backend.init_args.num_cpus=1",
        "trainer.limit_train_batches=3",
        timeout=900,
        flags=["-m"],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not left, left
    [summary] = (tmp_path / "logs").glob("*/multiruns/*/summary.csv")
    rows = list(csv.DictReader(summary.open()))
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert sorted(r["federate.alpha"] for r in rows) == ["0.1", "1.0"]


def test_rays_workers_start_without_building_the_iri_grammar():
    """`init_ray` puts federated/ray_site first on the PYTHONPATH of Ray's processes: a worker
    has imported ray (and with it jsonschema) without building rfc3987-syntax's grammar, ~1.8 s
    of CPU in each of Ray's processes otherwise."""
    probe = (
        "import sys, ray\n"
        "from litlab.federated.processes import init_ray\n"
        "args = {'num_cpus': 1, 'include_dashboard': False, 'object_store_memory': 10**8}\n"
        "init_ray({'init_args': args}, end=lambda: None, attempts=1)\n"
        "built = ray.remote(lambda: 'rfc3987_syntax.syntax_helpers' in sys.modules)\n"
        "print('jsonschema', ray.get(ray.remote(lambda: 'jsonschema' in sys.modules).remote()))\n"
        "print('built', ray.get(built.remote()))\n"
        "ray.shutdown()\n"
    )
    done = python_c(probe, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "jsonschema True" in done.stdout and "built False" in done.stdout, done.stdout
