"""`threads=auto`: torch's thread count from the cores other jobs leave free (litlab.threads)."""

import os
from pathlib import Path

import pytest

from litlab import threads
from litlab.errors import UserError


@pytest.fixture
def machine(monkeypatch):
    """A fake machine: `machine(cores, load, now=load)`, `now` the cores busy at this moment
    (None: no /proc/stat); OMP_NUM_THREADS unset. Returns the list of looks taken."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    looks = []

    def set_machine(cores: int, load: float, now: float | None = ...) -> list:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
        busy = load if now is ... else now
        monkeypatch.setattr(threads, "busy_now", lambda: looks.append(busy) or busy)
        return looks

    return set_machine


@pytest.mark.parametrize(
    ("cores", "load", "processes", "expected"),
    [
        (2, 0.1, 1, 2),  # a quiet 2-core machine: both cores
        (2, 1.0, 1, 1),  # one busy loop beside the run: one thread, not two fighting for a core
        (2, 6.0, 1, 1),  # the machine (load 4-6): one thread, never fewer
        (16, 4.2, 1, 12),  # 4 busy cores of 16: the 12 others
        (16, 0.0, 2, 8),  # DDP with 2 local processes: the free cores split between them
        (2, 0.0, 2, 1),  # trainer=ddp on 2 cores: one thread per process
    ],
)
def test_auto_uses_the_free_cores(machine, cores, load, processes, expected):
    machine(cores, load)
    assert threads.choose("auto", processes) == expected


@pytest.mark.parametrize(
    ("load", "now", "expected"),
    [
        (1.1, 0.05, 2),  # the load a run that just ended left behind: both cores, it is gone
        (1.9, 1.0, 1),  # a job still running beside this one: one thread
        (1.0, None, 1),  # no /proc/stat to look at: the load average decides
    ],
)
def test_auto_asks_what_the_cores_do_now_when_the_load_average_says_one_is_taken(
    machine, load, now, expected
):
    looks = machine(2, load, now)
    assert threads.choose("auto") == expected and len(looks) == 1


def test_a_quiet_machine_pays_no_look(machine):
    looks = machine(2, 0.4)
    assert threads.choose("auto") == 2 and looks == []


def test_a_core_another_thread_keeps_busy_counts_as_busy_now():
    """/proc/stat for real: a thread of this process spinning while the look sleeps is a core
    taken (the test workers' own load can only add to it, up to this process's cores)."""
    import threading
    import time

    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat on this platform")
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(0.05)
        busy = threads.busy_now(0.3)
    finally:
        stop.set()
        spinner.join()
    assert 0.7 <= busy <= threads.cores() + 0.05, busy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu  9 0 9 9 0 0 0 0\ncpu0 5 0 5 90 0 0 0 0 0 0\ncpu1 4 0 4 9 0 0 0 0\n", 0.0),
        ("cpu0 5 0 5\n", None),  # too few fields: a kernel of another age
        ("cpu0 five 0 5 90 0 0 0 0\n", None),  # not numbers
        ("intr 1 2 3\nctxt 9\n", None),  # no per-CPU line of this process's CPUs
        ("", None),
    ],
)
def test_a_stat_file_of_another_shape_leaves_the_decision_to_the_load(tmp_path, text, expected):
    """A /proc/stat that does not parse is no figure (never a traceback at a run's start); one
    whose counters did not move is cores idle."""
    stat = tmp_path / "stat"
    stat.write_text(text)
    assert threads.busy_now(0.0, str(stat)) == expected
    assert threads.busy_now(0.0, str(tmp_path / "missing")) is None


def test_omp_num_threads_wins_over_auto_and_explicit_counts_win_over_both(machine, monkeypatch):
    machine(2, 0.0)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.choose("auto") == 1
    assert threads.choose(2) == 2 and threads.choose("1") == 1
    assert threads.choose(None) is None and threads.choose("null") is None  # torch's default


@pytest.mark.parametrize("bad", [0, -1, "many", 1.5, True, float("nan"), 100000, 5, 10**30])
def test_bad_thread_counts_are_one_line_errors(bad, machine):
    """Not a count, or more threads than the machine's CPUs (4 here): torch would start them."""
    machine(4, 0.0)
    with pytest.raises(
        UserError, match=f"threads={bad} is not valid; use auto, an integer from 1 to 4"
    ):
        threads.choose(bad)
    assert threads.choose(4) == 4


def test_apply_exports_the_count_before_torch_and_sets_it_after(machine, monkeypatch):
    from omegaconf import OmegaConf

    machine(4, 1.0)
    cfg = OmegaConf.create({"threads": "auto", "trainer": {"devices": 1}})
    assert threads.apply(cfg) == 3
    assert os.environ["OMP_NUM_THREADS"] == "3" and os.environ["MKL_NUM_THREADS"] == "3"
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"  # waiting threads sleep, never spin
    import torch

    before = torch.get_num_threads()
    try:
        threads.apply(OmegaConf.create({"threads": 1}))  # a later job of a multirun
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    ddp = OmegaConf.create({"threads": "auto", "trainer": {"devices": 2}})
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert threads.apply(ddp) == 1  # 3 free cores, 2 processes


def test_the_configs_default_to_auto():
    root = Path(__file__).resolve().parents[1]
    for name in ("train", "eval"):
        assert "\nthreads: auto\n" in (root / "configs" / f"{name}.yaml").read_text()
