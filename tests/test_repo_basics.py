"""What a template repository ships, each working: LICENSE, pre-commit hooks that pass on the
tree and run offline, CI calling `.ci/run`, an installable package, a complete .env.example,
and a CPU-only torch route in the Makefile."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's tools: ruff, nbstripout, pre-commit-hooks


def tracked_files() -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    return [ROOT / n for n in names if n and (ROOT / n).is_file()]


def test_license_is_mit_and_the_package_says_so():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"


def test_pre_commit_hooks_are_local_and_their_tools_are_installed():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [h for repo in config["repos"] for h in repo["hooks"]]
    assert all(repo["repo"] == "local" for repo in config["repos"])  # nothing to fetch
    assert {h["id"] for h in hooks} >= {
        "ruff-check",
        "ruff-format",
        "trailing-whitespace",
        "end-of-file",
        "nbstripout",
    }
    for hook in hooks:
        assert hook["language"] == "system"
        tool = hook["entry"].split()[0]
        assert (BIN / tool).is_file() or shutil.which(tool), f"{tool} is not installed"


def test_ruff_lint_and_format_pass_on_the_tree():
    """The checks pre-commit's ruff hooks make, run with the installed ruff (pre-commit itself
    would also work offline here, but it writes fixes into the tree)."""
    ruff = str(BIN / "ruff") if (BIN / "ruff").is_file() else "ruff"
    for args in (["check", "--force-exclude", "."], ["format", "--check", "--force-exclude", "."]):
        proc = subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, f"ruff {' '.join(args)}:\n{proc.stdout[-3000:]}"


def test_tracked_text_files_have_no_trailing_whitespace_and_end_with_a_newline():
    bad = []
    for path in tracked_files():
        data = path.read_bytes()
        if b"\0" in data[:8192] or not data:
            continue  # binary or empty
        text = data.decode("utf-8", errors="replace")
        if not text.endswith("\n") or text.endswith("\n\n"):
            bad.append(f"{path.relative_to(ROOT)}: end of file")
        if path.suffix != ".md" and re.search(r"[ \t]+$", text, re.MULTILINE):
            bad.append(f"{path.relative_to(ROOT)}: trailing whitespace")
    assert not bad, bad


def test_github_ci_runs_the_same_make_test_as_ci_run():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    steps = [s.get("run", "") for job in workflow["jobs"].values() for s in job["steps"]]
    assert ".ci/run" in steps
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)


def test_editable_install_imports_litlab_without_pythonpath(tmp_path):
    """`pip install -e .` (offline: no dependencies, no build isolation) into a temp prefix;
    its site dir alone makes `litlab` and the Hydra plugin importable from another folder."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--ignore-installed",  # else pip uninstalls .venv's own editable litlab first
            "--prefix",
            str(tmp_path / "p"),
            "-e",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [site] = (tmp_path / "p").glob("lib/python*/site-packages")
    code = (
        "import site, sys; site.addsitedir(sys.argv[1]); import litlab, litlab.threads; "
        "import hydra_plugins.litlab_optuna_sweeper.optuna_sweeper as p; "
        "print(litlab.__file__); print(p.__file__)"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no PYTHONPATH
    proc = subprocess.run(
        [sys.executable, "-c", code, str(site)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [
        str(ROOT / "src" / "litlab" / "__init__.py"),
        str(ROOT / "src" / "hydra_plugins" / "litlab_optuna_sweeper" / "optuna_sweeper.py"),
    ]


def test_env_example_lists_every_variable_the_project_reads():
    listed = set(
        re.findall(r"^([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.MULTILINE)
    )
    code = " ".join(
        p.read_text() for p in [*ROOT.glob("src/**/*.py"), *ROOT.glob("configs/**/*.yaml")]
    )
    read = set(re.findall(r"environ(?:\.get\(|\[)\"([A-Z][A-Z0-9_]+)\"", code))
    read |= set(re.findall(r"oc\.env:([A-Z][A-Z0-9_]+)", code))
    user_facing = {v for v in read if v.startswith(("LITLAB_", "WANDB_", "MLFLOW_", "HYDRA_"))}
    user_facing.discard("LITLAB_OPTUNA_TRIAL")  # set by the sweeper for its own jobs
    user_facing.discard("LITLAB_SERVE")  # set by serve.py for its own uvicorn workers
    user_facing.discard("LITLAB_SWEEP_RESUME")  # set by the grid sweeper for a job it resumes
    assert user_facing <= listed, user_facing - listed
    assert {
        "LITLAB_DATA_DIR",
        "OMP_NUM_THREADS",
        "WANDB_MODE",
        "WANDB_API_KEY",
        "MLFLOW_TRACKING_URI",
    } <= listed


def test_litlab_data_dir_moves_the_data_root(monkeypatch, tmp_path):
    from litlab.config.compose import compose

    assert compose("train", [], output_dir=tmp_path).paths.data_dir == str(ROOT / "data")
    monkeypatch.setenv("LITLAB_DATA_DIR", "/shared/datasets")
    assert compose("train", [], output_dir=tmp_path).paths.data_dir == "/shared/datasets"


@pytest.mark.slow
def test_pre_commit_itself_passes_offline_on_a_clone(tmp_path):
    """`pre-commit run --all-files` on a clone of HEAD (it would write fixes into the tree);
    all hooks are local, so it needs no network."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tmp_path / "repo")], check=True)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [str(BIN / "pre-commit"), "run", "--all-files"],
        cwd=tmp_path / "repo",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_installs_cpu_torch_only_when_asked():
    """`make -n` prints the commands without running them; -B as if .venv did not exist."""

    def commands(*args: str) -> str:
        return subprocess.run(
            ["make", "-n", "-B", *args, ".venv/.installed"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    pins = re.findall(
        r"^(torch(?:vision)?==\S+)", (ROOT / "requirements.txt").read_text(), re.MULTILINE
    )
    assert len(pins) == 2
    default = commands()
    assert "download.pytorch.org" not in default and "--no-deps -r requirements.lock" in default
    cpu = commands("TORCH=cpu").splitlines()
    torch_line = next(ln for ln in cpu if "--index-url" in ln)
    assert torch_line.endswith(f"--index-url https://download.pytorch.org/whl/cpu {' '.join(pins)}")
    # then the lock without the CUDA build: its torch, torchvision, triton and NVIDIA libraries
    lock = next(i for i, ln in enumerate(cpu) if "--no-deps -r .venv/cpu.lock" in ln)
    assert cpu.index(torch_line) < lock
    kept = subprocess.run(
        [
            "bash",
            "-c",
            next(ln for ln in cpu if "> .venv/cpu.lock" in ln).replace("> .venv/cpu.lock", ""),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "numpy==" in kept and not re.search(
        r"^(torch|torchvision|triton|nvidia-\S+)==", kept, re.MULTILINE
    )
    # the lock is one platform's (its `# platform:` line): elsewhere pip resolves the pins
    [platform] = re.findall(
        r"^# platform: (.+)$", (ROOT / "requirements.lock").read_text(), re.MULTILINE
    )
    assert "--no-deps -r requirements.lock" in commands(f"PLATFORM={platform}")
    elsewhere = commands("PLATFORM=Darwin arm64")
    assert "requirements.lock" not in elsewhere and "pip install -r requirements.txt" in elsewhere
    wrong = subprocess.run(
        ["make", "-n", "-B", "TORCH=gpu", ".venv/.installed"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert wrong.returncode != 0 and "TORCH=gpu is not known" in wrong.stderr


def test_uv_gets_the_package_sources_pip_is_configured_with(tmp_path, monkeypatch):
    """make's set-up passes pip's configured index, extra indexes and wheel folders to uv
    (tools/uv_install.py), each once, whether pip.conf or a PIP_ variable sets it, in uv's
    environment (not on the command line make echoes: an index URL may hold a password);
    with nothing configured, nothing: PyPI, for both."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("uv_install", ROOT / "tools" / "uv_install.py")
    uv_install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(uv_install)
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://user:secret@mirror.example/simple\n"
        "extra-index-url = file:///srv/a/simple file:///srv/b/simple\n"
        "find-links = /srv/wheels /srv/more\nconstraint = /srv/c.txt\n"
    )
    for name in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/wheels")
    assert uv_install.sources() == {
        "UV_DEFAULT_INDEX": "https://user:secret@mirror.example/simple",
        "UV_INDEX": "file:///srv/a/simple file:///srv/b/simple",
        "UV_FIND_LINKS": "/srv/wheels,/srv/more",  # set twice, passed once
    }
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS")
    assert uv_install.sources() == {}
    shown = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    assert "tools/uv_install.py --no-deps -r requirements.lock" in shown and "--index" not in shown


def test_make_coverage_counts_the_code_a_subprocess_runs(tmp_path):
    """`make coverage` (issue 49): with pyproject's [tool.coverage] settings, the lines an
    entry point runs in a subprocess are measured too. The probe below never imports litlab
    itself; only `python src/train.py` with a bad setting does, in its own process."""
    import coverage

    probe = tmp_path / "probe.py"
    probe.write_text(
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, 'src/train.py', 'trainer.max_epochs=abc'])\n"
    )
    # without `make coverage`'s own variables (this check may run inside it)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["COVERAGE_FILE"] = str(tmp_path / ".coverage")
    run = [sys.executable, "-m", "coverage"]
    rcfile = f"--rcfile={ROOT / 'pyproject.toml'}"
    before = set(ROOT.glob(".coverage*"))  # a `make coverage` of the user's may have left one
    subprocess.run(
        [*run, "run", rcfile, str(probe)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    subprocess.run([*run, "combine", rcfile, "-q"], cwd=ROOT, env=env, check=True, timeout=60)
    data = coverage.CoverageData(basename=str(tmp_path / ".coverage"))
    data.read()
    # the package this interpreter imports (the editable install's, which may be another checkout)
    cli = [f for f in data.measured_files() if f.replace(os.sep, "/").endswith("/litlab/cli.py")]
    assert cli, sorted(data.measured_files())[:10]
    assert data.lines(cli[0]), "no line of cli.py counted"
    assert set(ROOT.glob(".coverage*")) == before, "data files were left in the project"
