"""`threads=auto`: torch's thread count from the cores other jobs leave free (litlab.threads)."""

import os
from pathlib import Path

import pytest

from litlab import threads
from litlab.errors import UserError


@pytest.fixture
def machine(monkeypatch):
    """A fake machine: `machine(cores, load)`; OMP_NUM_THREADS unset."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)

    def set_machine(cores: int, load: float) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))

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
