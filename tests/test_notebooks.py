"""The tutorial notebooks run offline from top to bottom (nbmake), are committed clean, and
stay clean when a user runs them through `make notebook` (it serves git-ignored copies)."""

import json
import os
import shutil
import subprocess
import sys
import time
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
def test_notebook_runs(notebook, tmp_path):
    # each notebook imports litlab from src/ (as an editable install would provide), draws plots
    # off screen, and fails on its first error cell; its own asserts check the numbers it shows.
    # Its runs go to a temporary folder (LITLAB_LOG_DIR), not into the project's logs/.
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NBMAKE": "1", "OMP_NUM_THREADS": "1"}
    env["LITLAB_LOG_DIR"] = str(tmp_path / "logs")
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
            # litlab first, before nbmake's plugin imports nbformat and with it jsonschema:
            # importing litlab defers jsonschema's IRI grammar (litlab.compat.rfc3987, ~2 s)
            "-p",
            "litlab",
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


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def clone(tmp_path):
    """A repository holding this one's Makefile, .gitignore and tutorials, plus a one-cell
    tutorial that runs in a second (the real ones train), all committed."""
    import nbformat

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "notebooks", repo / "notebooks", ignore=shutil.ignore_patterns(".*"))
    made_of = ("requirements.txt", "requirements.lock", "tools/uv_install.py", "pyproject.toml")
    for name in ("Makefile", ".gitignore", *made_of, "src/train.py"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    # the tutorials' own way to find the project, from wherever the notebook runs
    [find_root] = {
        line
        for nb in NOTEBOOKS
        for cell in json.loads(nb.read_text())["cells"]
        for line in "".join(cell["source"]).splitlines()
        if line.startswith("ROOT = ")
    }
    tiny = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(f"from pathlib import Path\n{find_root}\nprint(ROOT)")]
    )
    nbformat.write(tiny, repo / "notebooks" / "00_tiny.ipynb")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tutorials")
    return repo


def make(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", *args], cwd=repo, capture_output=True, text=True, check=True
    )


def test_make_notebook_runs_copies_and_leaves_the_tracked_notebooks_clean(clone):
    """`make notebook` serves copies in notebooks/.work/: a tutorial executed there (outputs
    written back, as JupyterLab saves them) and JupyterLab's .ipynb_checkpoints/ (there or
    beside a tracked notebook opened directly) leave `git status` clean; a copy with the
    user's outputs is never overwritten, a deleted one comes back, a changed tutorial is
    pointed out; the port and extra arguments reach JupyterLab."""
    import nbclient
    import nbformat

    work = clone / "notebooks" / ".work"
    made = make(clone, "notebook-copies").stdout
    tracked = sorted(p.name for p in (clone / "notebooks").glob("*.ipynb"))
    assert sorted(p.name for p in work.glob("*.ipynb")) == tracked
    assert made.count("new copy: notebooks/.work/") == len(tracked)

    copy = work / "00_tiny.ipynb"
    ran = nbclient.NotebookClient(nbformat.read(copy, 4), resources={"metadata": {"path": work}})
    nbformat.write(ran.execute(), copy)
    for folder in (work, clone / "notebooks", clone):  # where JupyterLab keeps autosaves
        (folder / ".ipynb_checkpoints").mkdir(exist_ok=True)
        (folder / ".ipynb_checkpoints" / "00_tiny-checkpoint.ipynb").write_text("{}")
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    executed = copy.read_text()
    outputs = json.loads(executed)["cells"][0]["outputs"]
    # it ran in the copy's folder and found the project above it
    assert "".join(outputs[0]["text"]) == f"{clone}\n"

    (work / "01_quickstart.ipynb").unlink()
    again = make(clone, "notebook-copies").stdout
    assert again.strip() == "new copy: notebooks/.work/01_quickstart.ipynb"
    assert copy.read_text() == executed  # the user's copy is kept as it was
    os.utime(clone / "notebooks" / "00_tiny.ipynb", (time.time() + 5, time.time() + 5))
    changed = make(clone, "notebook-copies").stdout
    assert changed.startswith("note: notebooks/00_tiny.ipynb changed after")
    assert copy.read_text() == executed
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""

    dry = make(clone, "-n", "notebook", "PORT=9999", "ARGS=--no-browser").stdout.splitlines()
    [command] = [line for line in dry if "jupyter lab" in line]
    flags = command.split()
    assert "--notebook-dir=notebooks/.work" in flags and "--ServerApp.ip=127.0.0.1" in flags
    assert "--ServerApp.port=9999" in flags and "--ServerApp.port_retries=0" in flags
    assert flags[-1] == "--no-browser"
    plain = make(clone, "-n", "notebook").stdout.splitlines()
    [default] = [line for line in plain if "jupyter lab" in line]
    assert "--ServerApp.port" not in default  # JupyterLab's own: 8888 or the next free one
