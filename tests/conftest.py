"""Fixtures shared by the test modules (real data copies, CLI runs, the shared digits run) and the
suite's xdist scheduling; plain helpers are in tests/helpers/."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

# One intra-op thread per process (this one and every run it starts): `make test` runs one
# pytest worker per core, and torch's default of one thread per core in each of them (plus
# DDP's extra ranks) oversubscribes the cores, where torch's spinning threads slow small
# models down several times. Results do not depend on it; set OMP_NUM_THREADS to override.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# runs land where each test says (paths.log_dir), whatever the developer's shell sets
os.environ.pop("LITLAB_LOG_DIR", None)

from helpers.runs import (
    command_in_process,
    fingerprint,
    require_shared,
    run_cli,
    run_dirs,
)
from helpers.yaml_cache import composition_caches  # noqa: F401  (autouse: every test module)


def pytest_configure(config):
    """Keep the order the workers collect in (longest first, below): xdist's loadgroup
    otherwise re-sorts its units by their number of tests, which sent the slow stage's
    one-test units of several minutes (the matrix's kind rows) to its end. The garbage
    collector's thresholds are an entry point's."""
    if hasattr(config.option, "loadscopereorder"):  # xdist's option (absent without xdist)
        config.option.loadscopereorder = False
    # the collector's thresholds of an entry point's process, which the checks that run
    # commands in this one get anyway at their first command (`cli.run_main`): from the start
    import gc

    from litlab.cli import GC_THRESHOLDS

    gc.set_threshold(*GC_THRESHOLDS)
    # and what an entry point freezes as its run starts (`environment.freeze_imports`), frozen
    # now: a command run in this process then freezes nothing (not an earlier check's garbage)
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """`--dist loadgroup`: give each test marked `xdist_group(NAME)` the node id suffix
    `@NAME`, by which the controller sends a group to one worker (xdist's own suffix is not
    read by pytest 9: tests/helpers/xdist_compat.py)."""
    if not getattr(config.option, "loadgroup", False):
        return
    from helpers.xdist_compat import set_node_id

    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix):
            set_node_id(item, item.nodeid + suffix)
    # Longest first (by the last run's times in pytest's cache, else by tests/durations.json,
    # as a fresh clone and CI have no cache): the workers finish together instead of one
    # running a long test at the end while the others idle. Every worker sorts the same way
    # (the controller checks that all collected the same list).
    # A group stays in one piece, in its order (its module fixtures are built once).
    if os.environ.get("PYTEST_XDIST_WORKER"):
        cache = getattr(config, "cache", None)
        from helpers.budget import recorded_durations

        seconds = {**recorded_durations(), **(cache.get(DURATIONS_KEY, {}) if cache else {})}
        total, first = {}, {}
        for i, item in enumerate(items):
            unit = _work_unit(item.nodeid)
            total[unit] = total.get(unit, 0.0) + seconds.get(item.nodeid, 0.0)
            first.setdefault(unit, i)
        items.sort(key=lambda it: (-total[_work_unit(it.nodeid)], first[_work_unit(it.nodeid)]))


def _work_unit(nodeid: str) -> str:
    """What xdist's loadgroup sends to one worker: the group after `@`, else the test."""
    return nodeid.split("@")[-1] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


# seconds per test (setup + call + teardown) of the latest runs, kept in .pytest_cache
DURATIONS_KEY = "litlab/durations"
_durations: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    """A worker reports the CPU seconds it and its finished subprocesses used; the controller
    stores the times the next run sorts by, and fails a whole `make test` whose CPU time grew
    past its budget (helpers.budget)."""
    from helpers.budget import cpu_seconds, over_budget

    if os.environ.get("PYTEST_XDIST_WORKER"):
        session.config.workeroutput["cpu_s"] = cpu_seconds()  # read by pytest_testnodedown
        return
    cache = getattr(session.config, "cache", None)
    if _durations and cache is not None:
        cache.set(DURATIONS_KEY, {**cache.get(DURATIONS_KEY, {}), **_durations})
    if _durations and os.environ.get("LITLAB_SAVE_DURATIONS") == "1":
        from helpers.budget import save_durations

        save_durations(_durations)
    # with workers (their figures arrived first) the controller's children are those workers
    _cpu.setdefault("controller", cpu_seconds(children=not _cpu))
    whole = _durations and is_whole_default_suite(session.config)
    if whole and session.exitstatus == 0 and over_budget(_cpu, _durations) is not None:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# CPU seconds per xdist worker (and the controller's own, which runs the tests without -n)
_cpu: dict[str, float] = {}


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent with -p no:xdist
def pytest_testnodedown(node, error):
    """xdist's controller hook: a worker finished; keep the CPU time it reported."""
    if "cpu_s" in getattr(node, "workeroutput", {}):
        _cpu[node.gateway.id] = node.workeroutput["cpu_s"]


def pytest_terminal_summary(terminalreporter, config):
    """`make test` ends with its CPU time against the budget (the 20 slowest checks are listed
    above it by --durations=20)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not _durations:
        return
    from helpers.budget import budget_s, over_budget

    line = (
        f"{len(_durations)} checks: {sum(_cpu.values()):.0f} CPU seconds, "
        f"{sum(_durations.values()):.0f} worker seconds"
    )
    if is_whole_default_suite(config):
        message = over_budget(_cpu, _durations)
        terminalreporter.write_line(message or f"{line} (budget {budget_s():.0f} CPU seconds)")
    else:
        terminalreporter.write_line(f"{line} (a selection: no budget applies)")


def is_whole_default_suite(config) -> bool:
    """`make test` as written: every test file, the default marker expression, no -k."""
    from helpers.budget import DEFAULT_MARKERS

    args = [a for a in config.args if Path(a).resolve() != Path(__file__).parent.resolve()]
    return not args and not config.option.keyword and config.option.markexpr == DEFAULT_MARKERS


@pytest.fixture
def shared_data(tmp_path):
    """Copy a folder of ../shared/data (read-only there) into tmp (see require_shared)."""

    def copy(relative: str) -> Path:
        src = require_shared(relative)
        dst = tmp_path / "shared" / relative
        shutil.copytree(src, dst)
        for path in dst.rglob("*"):  # copies keep the read-only bits: make them writable
            path.chmod(path.stat().st_mode | 0o200)
        return dst

    return copy


@pytest.fixture
def cli(tmp_path):
    """`cli("train.py", "data=mnist", ...)`: a subprocess run with logs in tmp_path/logs."""

    def run(script: str, *overrides: str, **kwargs):
        return run_cli(script, *overrides, log_dir=tmp_path / "logs", **kwargs)

    return run


@dataclass(frozen=True)
class DigitsRun:
    run: Path  # the run dir of `train.py trainer.max_epochs=12 data.num_workers=0`
    best: Path  # its best checkpoint
    eval: Path  # the run dir of `eval.py ckpt_path=<best>` (metrics.json, predictions.csv)


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> DigitsRun:
    """The default recipe (digits, small CNN) trained once per session and tested by eval.py,
    shared by the xdist workers (a lock in their common temp folder); tests that use it are one
    xdist group, so no worker waits on the lock. Read-only: write elsewhere (checked below).
    Both commands run in the worker (their real `cli.run`): what they make is what is shared;
    the process of `python src/train.py` is test_console's default run."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this session's folder, above the workers' popen-gwN
    shared, logs = base / "digits_run", base / "digits_run" / "logs"
    with FileLock(base / "digits_run.lock"):
        if not (shared / "done").exists():
            shutil.rmtree(shared, ignore_errors=True)
            code, _, _ = command_in_process(
                "train.py", ["trainer.max_epochs=12", "data.num_workers=0"], logs
            )
            assert code == 0, f"the shared digits run exited {code} (its log: {logs})"
            best = next((run_dirs(logs)[-1] / "checkpoints").glob("epoch_*.ckpt"))
            code, _, _ = command_in_process("eval.py", [f"ckpt_path={best}"], logs)
            assert code == 0, f"eval.py of the shared digits run exited {code}"
            (shared / "done").touch()
    run = run_dirs(logs)[-1]
    before = fingerprint(shared)
    yield DigitsRun(
        run=run,
        best=next((run / "checkpoints").glob("epoch_*.ckpt")),
        eval=run_dirs(logs, "eval")[-1],
    )
    assert fingerprint(shared) == before, f"a test wrote into the shared {shared}"


@pytest.fixture(scope="module")
def ref_run(tmp_path_factory) -> Path:
    """The uninterrupted run that the kill-resume tests (test_reliability*.py) compare with,
    trained once per module (helpers.reliability.train)."""
    from helpers.reliability import train

    logs = tmp_path_factory.mktemp("ref")
    ref = train(logs)
    assert ref.returncode == 0, ref.stderr[-3000:]
    return run_dirs(logs)[0]
