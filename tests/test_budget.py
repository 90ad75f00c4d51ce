"""The suite's own budget (issue #49): a whole `make test` whose CPU time grows past
tests/helpers/budget.py's figure fails, naming the slowest checks."""

import subprocess
import sys

from helpers.budget import (
    DEFAULT_MARKERS,
    SAVE_FROM_S,
    budget_s,
    cpu_seconds,
    over_budget,
    recorded_durations,
    save_durations,
)


def test_a_suite_within_its_budget_passes_and_one_over_it_fails_naming_the_slowest():
    durations = {f"tests/test_a.py::test_{i}": 1.0 for i in range(100)}
    assert over_budget({"gw0": 300.0, "gw1": 300.0}, durations, budget=600.0) is None
    slow = {**durations, "tests/test_b.py::test_new@digits": 30.0}
    message = over_budget({"gw0": 300.0, "gw1": 330.0}, slow, budget=600.0)
    assert message is not None and "\n" not in message
    assert "used 630 CPU seconds, over its budget of 600" in message
    assert "tests/test_b.py::test_new 30 s" in message  # the group suffix is not shown


def test_cpu_seconds_count_the_subprocesses_a_check_waited_for():
    before = cpu_seconds()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    assert cpu_seconds() - before > 0.1


def test_the_printed_cpu_seconds_are_those_the_run_used_counted_once():
    """The figure the budget judges is the CPU time of pytest's whole process tree: xdist's
    controller reaps its workers, so counting its children besides the workers' own reports
    printed about twice what the run used (1,239 'CPU seconds' for ~620 used)."""
    import os
    import re

    from helpers.runs import ROOT

    # a controller of its own: not one of this run's xdist workers (their variables say so)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    before = cpu_seconds()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-p", "no:cacheprovider", "-q",
         "tests/test_budget.py::test_saving_durations_keeps_the_checks_of_a_second_or_more"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    used = cpu_seconds() - before
    printed = re.search(r"1 checks: (\d+) CPU seconds", proc.stdout)
    assert proc.returncode == 0 and printed, proc.stdout[-2000:]
    # the figure is rounded to whole seconds; `used` is the tree's, its start-up included
    assert used * 0.5 - 0.5 <= int(printed[1]) <= used + 0.5, (printed[0], used)


def test_the_budget_applies_to_what_make_test_selects(monkeypatch):
    """The markers pyproject gives `make test` are the ones the budget is checked under."""
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    addopts = tomllib.loads(pyproject.read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert f"-m '{DEFAULT_MARKERS}'" in addopts
    monkeypatch.setenv("LITLAB_TEST_BUDGET_S", "123")
    assert budget_s() == 123.0


def test_a_cpu_without_avx512_gets_its_own_budget(monkeypatch, tmp_path):
    """The suite's CPU time depends on the CPU kind: an AVX2-only EPYC used ~670 CPU seconds
    where the AVX-512 kind used ~427; each kind's budget leaves the same room for growth."""
    from helpers import budget

    monkeypatch.delenv("LITLAB_TEST_BUDGET_S", raising=False)
    avx2, avx512 = tmp_path / "avx2", tmp_path / "avx512"
    avx2.write_text("flags\t\t: fpu sse sse2 avx avx2 fma\n")
    avx512.write_text("flags\t\t: fpu sse sse2 avx avx2 avx512f avx512bw avx512vl\n")
    assert not budget.has_avx512(avx2) and budget.has_avx512(avx512)
    assert budget.has_avx512(tmp_path / "missing")  # unreadable: CI's kind
    monkeypatch.setattr(budget, "has_avx512", lambda: False)
    assert budget.budget_s() == budget.BUDGET_CPU_S_WITHOUT_AVX512
    monkeypatch.setattr(budget, "has_avx512", lambda: True)
    assert budget.budget_s() == budget.BUDGET_CPU_S


def test_a_checkout_without_a_cache_orders_its_checks_by_the_committed_durations(pytestconfig):
    """CI's fresh clone has no pytest cache: tests/durations.json gives its checks their
    longest-first order (the slow stage's kind rows of several minutes among them), and
    xdist's loadgroup keeps that order instead of sorting units by their number of tests."""
    from pathlib import Path

    recorded = recorded_durations()
    assert recorded and min(recorded.values()) >= SAVE_FROM_S
    root = Path(__file__).parents[1]
    assert all((root / nodeid.split("::")[0]).is_file() for nodeid in recorded)
    assert any("test_one_row_per_task_kind_has_no_failed_cell[" in k for k in recorded)
    if hasattr(pytestconfig.option, "loadscopereorder"):  # xdist loaded
        assert pytestconfig.option.loadscopereorder is False


def test_saving_durations_keeps_the_checks_of_a_second_or_more(tmp_path):
    import json

    path = tmp_path / "durations.json"
    path.write_text(json.dumps({"t::a": 5.0, "t::b": 3.0, "t::c": 2.0}))
    save_durations({"t::b": 0.2, "t::c": 4.04, "t::d": 1.5, "t::e": 0.9}, path)
    # b is now fast (it leaves), c took longer, d is new, e is too short to keep
    assert json.loads(path.read_text()) == {"t::a": 5.0, "t::c": 4.0, "t::d": 1.5}
