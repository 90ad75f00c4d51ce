"""The tutorial notebooks run offline from top to bottom (nbmake), and are committed clean."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, len(NOTEBOOKS) + 1)]
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


# the quickstart runs in `make test`; the others (20-30 s each) with the slow checks (.ci/run)
RUNS = [
    nb if nb.name.startswith("01") else pytest.param(nb, marks=pytest.mark.slow) for nb in NOTEBOOKS
]


@pytest.mark.parametrize("notebook", RUNS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(notebook):
    # each notebook imports litlab from src/ (as an editable install would provide), draws plots
    # off screen, and fails on its first error cell; its own asserts check the numbers it shows
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NBMAKE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbmake",
            "--nbmake-timeout=900",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-q",
            "-o",
            "addopts=",
            str(notebook),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert "1 passed" in done.stdout


def test_readme_links_every_notebook():
    readme = (ROOT / "README.md").read_text()
    assert [nb.name for nb in NOTEBOOKS if f"(notebooks/{nb.name})" not in readme] == []
