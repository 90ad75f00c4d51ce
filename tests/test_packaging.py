"""Packaging: pyproject.toml's dependencies and extras agree with the pinned lock that `make`
installs; an installed litlab declares no test or lint tool outside an extra; `.env` is read
at start; a missing extra costs one line naming it. The slow checks build a fresh environment
(a venv reusing .venv's packages, litlab installed editable into it, no PYTHONPATH) and run
notebook 01 there with `jupyter nbconvert --execute`, and start `make notebook`'s JupyterLab."""

import json
import os
import re
import shutil
import site
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from helpers.runs import ROOT
from packaging.requirements import Requirement

TOOLS = {  # test, lint and notebook tooling: only ever in the `dev` extra
    "pytest",
    "pytest-xdist",
    "ruff",
    "pre-commit",
    "pre-commit-hooks",
    "nbmake",
    "nbstripout",
    "import-linter",
    "jupyterlab",
    "ipykernel",
    "ipywidgets",
}
EXTRA_OF = {
    "flwr": "federated",
    "mlflow": "mlflow",
    "medmnist": "medmnist",
    "torch-tensorrt": "gpu",
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(*files: str) -> dict[str, str]:
    """name -> pinned version of requirements files (every line must be `name==version`)."""
    found = {}
    for file in files:
        for line in (ROOT / file).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                req = Requirement(line)
                [spec] = list(req.specifier)
                assert spec.operator == "==", f"{file}: {line} is not pinned"
                found[norm(req.name)] = spec.version
    return found


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_dependencies_and_extras_are_the_lock():
    """Every requirement of pyproject.toml is pinned in a requirements file, to a version it
    allows; requirements.txt holds nothing else (the lock = dependencies + extras)."""
    meta = project()
    declared = {None: meta["dependencies"], **meta["optional-dependencies"]}
    lock = pins("requirements.txt")
    everything = {**lock, **pins("requirements-optional.txt", "requirements-gpu.txt")}
    names = set()
    for extra, reqs in declared.items():
        for text in reqs:
            req = Requirement(text)
            name = norm(req.name)
            names.add(name)
            assert name in everything, f"{text} ({extra or 'dependencies'}) is pinned nowhere"
            assert req.specifier.contains(everything[name], prereleases=True), (text, extra)
            if name in TOOLS:
                assert extra == "dev", f"{name} is a tool: it belongs in the dev extra"
            if name in EXTRA_OF:
                assert extra == EXTRA_OF[name], f"{name} belongs in the {EXTRA_OF[name]} extra"
    assert set(lock) <= names, f"pinned but declared nowhere: {set(lock) - names}"
    assert {"dev", "federated", "mlflow", "medmnist", "gpu"} <= set(meta["optional-dependencies"])


def test_the_lock_is_requirements_txt_resolved_with_every_package_pinned():
    """requirements.lock (what make installs, with --no-deps) pins every direct pin of
    requirements.txt at its version, and every package any of them requires, so that nothing
    is left to resolve (read from the installed packages' metadata: the lock is what make put
    in .venv)."""
    from importlib.metadata import distributions

    direct, lock = pins("requirements.txt"), pins("requirements.lock")
    assert {n: lock.get(n) for n in direct} == direct, "make lock: requirements.lock is stale"
    installed = {norm(d.metadata["Name"]): d for d in distributions()}
    absent = sorted(set(lock) - set(installed))
    assert not absent, f"in requirements.lock but not in .venv (make -B .venv/.installed): {absent}"
    missing = set()
    for name in lock:
        for text in installed[name].requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                missing |= {norm(req.name)} - set(lock)
    assert not missing, f"required but not in requirements.lock: {sorted(missing)}"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv whose base packages are .venv's (a .pth, no 5 GB reinstall) and litlab
    installed into it as `make` does it (editable, no dependencies): no PYTHONPATH anywhere."""
    root = tmp_path_factory.mktemp("fresh")
    subprocess.run(
        [sys._base_executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True
    )
    python = root / "venv" / "bin" / "python"
    inner = subprocess.run(
        [python, "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shared = site.getsitepackages()[0]  # the test's own environment (.venv)
    Path(inner, "base_packages.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    proc = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        # never uninstall .venv's own editable litlab, which the base_packages.pth shows it
        + ["--ignore-installed"]
        + ["-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(root),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, python, Path(inner)


def clean_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "HOME": str(home), "JUPYTER_PLATFORM_DIRS": "1"}


def test_installed_metadata_has_no_tool_outside_an_extra_and_litlab_imports_anywhere(venv):
    root, python, site_dir = venv
    [dist] = site_dir.glob("litlab-*.dist-info")
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in (dist / "METADATA").read_text().splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    runtime = {norm(Requirement(r).name) for r in requires if "extra ==" not in r}
    assert runtime and not runtime & (TOOLS | set(EXTRA_OF)), runtime & (TOOLS | set(EXTRA_OF))
    for line in requires:
        name = norm(Requirement(line).name)
        if name in TOOLS:
            assert 'extra == "dev"' in line, line
    proc = subprocess.run(
        [python, "-c", "import litlab, litlab.api; print(litlab.__file__)"],
        cwd=root,
        capture_output=True,
        text=True,
        env=clean_env(root),
    )
    assert proc.stdout.strip() == str(ROOT / "src" / "litlab" / "__init__.py"), proc.stderr


@pytest.mark.slow  # a kernel trains the quickstart's 3 epochs: ~1 min of CPU
def test_nbconvert_runs_notebook_01_without_pythonpath(venv):
    root, python, _ = venv
    out = root / "out"
    proc = subprocess.run(
        # `jupyter nbconvert` of this venv (`jupyter` would look for `jupyter-nbconvert` on PATH)
        [python, "-m", "nbconvert", "--to", "notebook", "--execute"]
        + [str(ROOT / "notebooks" / "01_quickstart.ipynb"), "--output-dir", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env={**clean_env(root), "NBMAKE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    cells = json.loads((out / "01_quickstart.ipynb").read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    text = "".join("".join(o.get("text", "")) for o in outputs)
    assert "test accuracy" in text and "CONFIG" not in text  # the header only, not the tree
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert not re.search(r"ipywidgets|IProgress|Warning", text), text[-3000:]
    run_dir = Path(re.search(r"run dir: (\S+)", text).group(1))
    assert len((run_dir / "config_tree.txt").read_text().splitlines()) > 50  # the whole tree
    shutil.rmtree(run_dir)  # it was written under the project's logs/


@pytest.mark.slow  # JupyterLab's start: ~10-30 s
def test_make_notebook_starts_jupyterlab_on_the_venv(tmp_path):
    """`make notebook PORT=...`'s JupyterLab (on a copy folder of its own here: the make
    step that fills notebooks/.work/ is tests/test_notebooks.py's) answers on that port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dry = subprocess.run(
        ["make", "-n", "notebook", f"PORT={port}", "ARGS=--no-browser"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    [command] = [line for line in dry if "jupyter lab" in line]
    assert command.startswith(".venv/bin/jupyter lab") and "127.0.0.1" in command
    copies = tmp_path / "copies"
    copies.mkdir()
    command = command.replace("--notebook-dir=notebooks/.work", f"--notebook-dir={copies}")
    server = subprocess.Popen(
        [*command.split(), "--IdentityProvider.token=t28"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(tmp_path),
    )
    try:
        deadline, status = time.time() + 180, None
        while time.time() < deadline and status is None:
            try:
                url = f"http://127.0.0.1:{port}/api/kernelspecs?token=t28"
                with urllib.request.urlopen(url, timeout=5) as r:
                    status = (r.status, json.loads(r.read()))
            except OSError:
                time.sleep(1)
        assert status is not None and status[0] == 200, "JupyterLab did not answer"
        # "python": jupyter_client runs it as the server's own interpreter, .venv's python
        assert status[1]["kernelspecs"]["python3"]["spec"]["argv"][0] == "python"
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_dotenv_in_the_working_folder_sets_the_data_and_log_roots(tmp_path):
    """`.env` read at start (python-dotenv); a variable of the shell wins over it."""
    (tmp_path / ".env").write_text(
        f"LITLAB_DATA_DIR={tmp_path / 'from_dotenv'}\nLITLAB_LOG_DIR={tmp_path / 'runs'}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LITLAB_DATA_DIR", "LITLAB_LOG_DIR")}

    def paths(env) -> dict:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "src" / "train.py"), "--cfg", "job", "--resolve"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return dict(re.findall(r"^  (data_dir|log_dir): (\S+)$", proc.stdout, re.MULTILINE))

    found = paths(env)
    assert found == {"data_dir": str(tmp_path / "from_dotenv"), "log_dir": str(tmp_path / "runs")}
    assert paths({**env, "LITLAB_DATA_DIR": "/from/shell"})["data_dir"] == "/from/shell"
    assert paths({**env, "LITLAB_LOG_DIR": "/from/shell"})["log_dir"] == "/from/shell"
    # `NAME=` (a .env copied from .env.example as it is) leaves the default, not ''
    (tmp_path / ".env").write_text("LITLAB_DATA_DIR=\nLITLAB_LOG_DIR=\n")
    assert paths(env) == {"data_dir": str(ROOT / "data"), "log_dir": str(ROOT / "logs")}


@pytest.mark.parametrize("name", ["LITLAB_DATA_DIR", "LITLAB_LOG_DIR"])
def test_a_root_that_omegaconf_would_parse_is_refused_in_one_line(name, tmp_path):
    """A value with `${` (OmegaConf read it as an interpolation: a GrammarParseError, or a
    traceback for a valid one): one line naming the variable, exit 2, nothing written."""
    env = {k: v for k, v in os.environ.items() if k not in ("LITLAB_DATA_DIR", "LITLAB_LOG_DIR")}
    env[name] = str(tmp_path / "${oc.env:HOME}")
    logs = [] if name == "LITLAB_LOG_DIR" else [f"paths.log_dir={tmp_path / 'logs'}"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), *logs],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        f"error: {name}={env[name]!r}: a folder path without '${{'; set a plain path"
    )
    assert not list(tmp_path.rglob("runs"))


def test_a_missing_extra_is_named_in_one_line():
    from litlab.environment import missing_extra

    def missing(name: str) -> ModuleNotFoundError:
        return ModuleNotFoundError(f"No module named '{name}'", name=name)

    wrapped = RuntimeError("logger (LocalMLFlowLogger) cannot be built")
    wrapped.__cause__ = missing("mlflow.store")
    assert "'mlflow' extra" in missing_extra(wrapped)
    assert "'federated' extra" in missing_extra(missing("flwr"))
    assert "\n" not in missing_extra(missing("medmnist"))
    assert missing_extra(missing("numpyy")) is None and missing_extra(ValueError()) is None
