"""Shared test helpers: real data copies, CLI runs in subprocesses, in-process config composition."""

import csv
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

# One intra-op thread per process (this one and every run it starts): `make test` runs one
# pytest worker per core, and torch's default of one thread per core in each of them (plus
# DDP's extra ranks) oversubscribes the cores, where torch's spinning threads slow small
# models down several times. Results do not depend on it; set OMP_NUM_THREADS to override.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from litlab.config.compose import compose  # noqa: F401  (re-exported for tests)

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("LITLAB_SHARED_DATA", ROOT.parent / "shared" / "data"))
# overrides that keep train.py quiet in tests (eval.py has no callbacks group: QUIET_EVAL)
QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null"]
QUIET_EVAL = ["extras.print_config=false"]


def on_ci() -> bool:
    """CI services (GitHub Actions, GitLab, ...) set CI=true."""
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def require_shared(relative: str) -> Path:
    """The path of ../shared/data/<relative>. Absent: a skip with the reason, except on CI
    (CI=true), where a missing copy is a failure: a green CI run has run the real-data tests."""
    src = SHARED_DATA / relative
    if not src.exists():
        reason = f"real data {src} is absent (see ../shared/data/README.md)"
        if on_ci():
            pytest.fail(f"{reason}; CI=true, so this fails instead of skipping")
        pytest.skip(reason)
    return src


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """`--dist loadgroup`: give each test marked `xdist_group(NAME)` the node id suffix
    `@NAME`, by which the controller sends a group to one worker. pytest-xdist 3.8 sets it as
    `item._nodeid`, which pytest 9 no longer reads (the id is `item._id`), so every group was
    spread over all workers and each built the group's module fixtures again."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)
    # Longest first (by the last run's times, in pytest's cache): the workers finish together
    # instead of one running a long test at the end while the other idles. Every worker
    # sorts the same way (the controller checks that all collected the same list).
    # A group stays in one piece, in its order (its module fixtures are built once).
    if os.environ.get("PYTEST_XDIST_WORKER") and getattr(config, "cache", None) is not None:
        seconds, total, first = config.cache.get(DURATIONS_KEY, {}), {}, {}
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
    """The controller (not an xdist worker) stores the times the next run sorts by."""
    cache = getattr(session.config, "cache", None)
    if _durations and cache is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        cache.set(DURATIONS_KEY, {**cache.get(DURATIONS_KEY, {}), **_durations})


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


def run_cli(
    script: str,
    *overrides: str,
    log_dir: Path,
    timeout: float = 240,
    env=None,
    check: bool = True,
    quiet: bool = True,
) -> subprocess.CompletedProcess:
    """Run `python src/<script> overrides...` as a user would, logs under `log_dir`."""
    cmd = [sys.executable, str(ROOT / "src" / script), f"paths.log_dir={log_dir}"]
    if quiet:
        cmd += QUIET if script == "train.py" else QUIET_EVAL
    cmd += list(overrides)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=full_env
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc


@pytest.fixture
def cli(tmp_path):
    """`cli("train.py", "data=mnist", ...)`: a subprocess run with logs in tmp_path/logs."""

    def run(script: str, *overrides: str, **kwargs):
        return run_cli(script, *overrides, log_dir=tmp_path / "logs", **kwargs)

    return run


def run_dirs(log_dir: Path, task: str = "train") -> list[Path]:
    return sorted((log_dir / task / "runs").glob("*"))


def fingerprint(folder: Path) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of everything under a folder: equal lists, nothing was written."""
    return sorted(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    )


def results(stdout: str) -> list[dict[str, float]]:
    """The 'Results' blocks that train.py/eval.py print, one dict per job."""
    found = []
    for block in stdout.split("\nResults\n")[1:]:  # one line per split: `  test   acc 0.99  f1 ..`
        lines = re.findall(r"^  (\S+) +(.+)$", block.split("\nFiles\n")[0], re.MULTILINE)
        found.append(
            {
                f"{split}/{name}": float(value)
                for split, rest in lines
                for name, value in re.findall(r"(\S+) (\S+)", rest)
            }
        )
    return found


def csv_test_metrics(run_dir: Path) -> dict[str, float]:
    """The test/* row of a run's CSV log (written by rank 0; exactly one test per run)."""
    with open(run_dir / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("test/acc") or r.get("test/loss")]
    assert len(rows) == 1, rows
    return {k: float(v) for k, v in rows[0].items() if k.startswith("test/") and v}


@dataclass(frozen=True)
class DigitsRun:
    run: Path  # the run dir of `train.py trainer.max_epochs=12 data.num_workers=0`
    stdout: str  # what that command printed
    best: Path  # its best checkpoint
    eval: Path  # the run dir of `eval.py ckpt_path=<best>` (metrics.json, predictions.csv)


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> DigitsRun:
    """The default recipe (digits, small CNN) trained once per session and tested by eval.py,
    shared by the xdist workers (a lock in their common temp folder); tests that use it are one
    xdist group, so no worker waits on the lock. Read-only: write elsewhere (checked below)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this session's folder, above the workers' popen-gwN
    shared, logs = base / "digits_run", base / "digits_run" / "logs"
    with FileLock(base / "digits_run.lock"):
        if not (shared / "done").exists():
            shutil.rmtree(shared, ignore_errors=True)
            proc = run_cli("train.py", "trainer.max_epochs=12", "data.num_workers=0", log_dir=logs)
            best = next((run_dirs(logs)[-1] / "checkpoints").glob("epoch_*.ckpt"))
            run_cli("eval.py", f"ckpt_path={best}", log_dir=logs)
            (shared / "stdout.txt").write_text(proc.stdout)
            (shared / "done").touch()
    run = run_dirs(logs)[-1]
    before = fingerprint(shared)
    yield DigitsRun(
        run=run,
        stdout=(shared / "stdout.txt").read_text(),
        best=next((run / "checkpoints").glob("epoch_*.ckpt")),
        eval=run_dirs(logs, "eval")[-1],
    )
    assert fingerprint(shared) == before, f"a test wrote into the shared {shared}"


# a small segmentation recipe on 24^3 phantoms (16^3 patches, a 3-level U-Net)
TINY_SEG = [
    "model=unet3d",
    "data.num_volumes=24",
    "data.size=24",
    "data.size_jitter=3",
    "data.patch_size=[16,16,16]",
    "data.samples_per_volume=8",
    "data.batch_size=8",
    "model.net.channels=[8,16,32]",
    "model.net.strides=[2,2]",
    "model.net.num_res_units=1",
    "model.optimizer.lr=0.01",
    "seed=1",
]
