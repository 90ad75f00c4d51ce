"""Paths, settings and helpers for tests that run litlab's commands (subprocesses, or in this
process where the process is not what they check) and read their run dirs; tests/conftest.py
holds the fixtures built on them."""

import csv
import logging
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("LITLAB_SHARED_DATA", ROOT.parent / "shared" / "data"))
# overrides that keep train.py quiet in tests (eval.py has no callbacks group: QUIET_EVAL)
QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null"]
QUIET_EVAL = ["extras.print_config=false"]
# the smallest budget that still trains, validates and tests: 2 epochs of 3 batches, 2 val and
# test batches, no sanity check (sweeps of several jobs in subprocesses)
TINY_BUDGET = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.num_sanity_val_steps=0",
    "callbacks.model_summary=null",
]


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


def run_in_process(
    script: str, overrides: list[str], log_dir, capfd, flags: tuple[str, ...] = ()
) -> tuple[int, str]:
    """`python src/<script> [flags] overrides` inside this process (its real
    `cli.run(main)`, argv and all, without a new interpreter's imports): (exit code, stderr)."""
    code, _, err = command_in_process(script, overrides, log_dir, capfd, flags=flags)
    return code, err


def command_in_process(
    script: str, overrides: list[str], log_dir, capfd=None, quiet: bool = True, flags=()
) -> tuple[int, str, str]:
    """`run_in_process`'s run: (exit code, stdout, stderr); without `capfd` (a module
    fixture's run) the output is left to pytest's capture and read as ''. `quiet=False`:
    without QUIET's overrides, as a user types the command. `flags` (Hydra's own, such as
    `--config-dir DIR`) come before the overrides, as argparse wants them."""
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # Hydra reconfigures logging: put it back
    environ = dict(os.environ)  # the command exports PYTHONPATH and thread counts: put them back
    settings = (QUIET if script == "train.py" else QUIET_EVAL) if quiet else []
    saved, sys.argv = (
        sys.argv,
        [str(ROOT / "src" / script), *flags, f"paths.log_dir={log_dir}", *settings, *overrides],
    )
    if capfd is not None:
        capfd.readouterr()
    try:
        runpy.run_path(str(ROOT / "src" / script), run_name="__main__")  # as `python src/...`
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()
        for handler in root.handlers[:]:
            if handler not in handlers:
                handler.close()
                root.removeHandler(handler)
        root.handlers[:], root.level = handlers, level
        os.environ.clear()
        os.environ.update(environ)
    out, err = capfd.readouterr() if capfd is not None else ("", "")
    return code, out, err


def python_c(code: str, *path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -c code` in a fresh interpreter, from the project root, with `path` (folders)
    then src/ as its PYTHONPATH: for what only a new process shows (what an import loads)."""
    pythonpath = os.pathsep.join([*map(str, path), str(ROOT / "src")])
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, "PYTHONPATH": pythonpath},
    )  # fmt: skip


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
