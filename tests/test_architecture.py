"""The layout holds: import contracts (.importlinter), thin entry points, short functions, and
a utils/ that only holds what several modules share."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.runs import ROOT, python_c

SRC = ROOT / "src"


def test_import_contracts_hold():
    """entry points -> recipes -> config/checkpointing -> domains -> basics; nets import no
    litlab module above them; no cycles (the contracts and why: .importlinter)."""
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run(
        [exe, "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _litlab_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("litlab"):
            names |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("litlab")}
    return names


def test_entry_points_are_thin_and_call_a_recipe():
    for script, recipe in (
        ("train.py", "litlab.recipes"),
        ("eval.py", "litlab.export.evaluate"),
    ):
        path = SRC / script
        assert len(path.read_text().splitlines()) <= 30, script
        imports = _litlab_imports(path)
        assert recipe in imports and "litlab.cli" in imports, (script, imports)


def test_utils_modules_have_several_users():
    """Files are cut by concept, not by a line cap (issue #47): a kind's module holds all of
    its behaviour, LitModule all of its protocol; utils/ holds only what several modules share."""
    sources = list(SRC.rglob("*.py"))
    imports = {p: _litlab_imports(p) for p in sources}
    for module in (SRC / "litlab" / "utils").glob("*.py"):
        if module.name == "__init__.py":
            continue
        name = f"litlab.utils.{module.stem}"
        users = [
            p
            for p, names in imports.items()
            if p != module and any(n == name or n.startswith(name + ".") for n in names)
        ]
        assert len(users) >= 2, (name, users)


def _public_definitions() -> tuple[dict, dict]:
    """({top-level public function or class name: modules defining it}, {public class name:
    modules defining one, at any depth}) over src/litlab. An import is no definition, so a
    package re-exporting its own names is not counted."""
    top, classes = {}, {}
    for path in sorted((SRC / "litlab").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        for node in tree.body:
            definition = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if definition and not node.name.startswith("_"):
                top.setdefault(node.name, []).append(module)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                classes.setdefault(node.name, []).append(module)
    return top, classes


def test_one_name_one_definition():
    """One word, one meaning (docs/glossary.md): no two public classes share a name, and no
    public function or class is defined in two modules (a package's __init__ re-exporting
    its own is an import, not a definition). A second `check` or `load` elsewhere gets the
    name of what it checks or loads."""
    top, classes = _public_definitions()
    twice = {name: modules for name, modules in top.items() if len(modules) > 1}
    assert twice == {}, "public names defined in more than one module: " + str(twice)
    shared = {name: modules for name, modules in classes.items() if len(modules) > 1}
    assert shared == {}, "public classes sharing a name: " + str(shared)


def test_the_one_definition_scan_finds_what_it_is_for(tmp_path, monkeypatch):
    """The scan can fail: two modules defining `load`, two classes named `Settings` (one nested
    in a function), are found; a re-export is not."""
    package = tmp_path / "litlab"
    package.mkdir()
    (package / "__init__.py").write_text("from litlab.a import load\n")
    (package / "a.py").write_text("def load():\n    pass\n\nclass Settings:\n    pass\n")
    (package / "b.py").write_text("def load():\n    pass\n\ndef f():\n    class Settings: ...\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    top, classes = _public_definitions()
    assert top == {"load": ["litlab.a", "litlab.b"], "Settings": ["litlab.a"], "f": ["litlab.b"]}
    assert classes == {"Settings": ["litlab.a", "litlab.b"]}


def test_no_function_is_longer_than_80_lines():
    """Functions that read top to bottom: none in src/ longer than 80 lines (docstring in)."""
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert not long, long


# modules of tests/ that are not test modules: the Hydra targets that subprocesses import
# (PYTHONPATH=tests), the matrix script and its cells; every other helper is in tests/helpers/
TEST_SIDE_MODULES = {"conftest", "ddp_probe", "faults", "feature_matrix", "matrix_cells"}


def _imported_names(node: ast.AST) -> list[str]:
    """The modules a statement or call imports: `import`, `from ... import`, and a call of
    `__import__` or `importlib.import_module` with a literal name (both hide an import from a
    scan of import statements)."""
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name in ("__import__", "import_module") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def test_tests_import_their_helpers_from_one_package():
    """A test imports what it shares with others from tests/helpers/ (fixtures come from
    conftest.py by name), never from conftest or from another test module."""
    tests = ROOT / "tests"
    wrong = []
    for path in sorted(tests.rglob("*.py")):
        if path.parent == tests and path.stem not in TEST_SIDE_MODULES:
            assert path.name.startswith("test_"), f"{path.name}: a helper belongs in tests/helpers/"
        for node in ast.walk(ast.parse(path.read_text())):
            names = _imported_names(node)
            wrong += [
                f"{path.relative_to(tests)}:{node.lineno} imports {name}"
                for name in names
                if name == "conftest" or name.startswith("test_")
            ]
    assert not wrong, wrong


def test_what_runs_before_hydra_parses_imports_nothing_heavy():
    """`litlab.cli` (imported by every entry point before Hydra parses the command line)
    brings in none of torch, lightning or pydantic: those come with the config checks."""
    probe = (
        "import sys; import litlab.cli\n"
        "print(sorted(m for m in ('torch', 'lightning', 'pydantic') if m in sys.modules))"
    )
    done = python_c(probe)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_an_entry_point_runs_with_the_collectors_rare_thresholds(monkeypatch):
    """`cli.run_main` sets the garbage collector's thresholds of an entry point's process
    before Hydra parses and the heavy imports start (BENCHMARKS.md "The garbage collector at
    start-up"), whatever the process had."""
    import gc

    from litlab import cli

    seen = []
    monkeypatch.setattr(sys, "argv", [str(ROOT / "src" / "train.py")])
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # Python's default
    try:
        cli.run_main(lambda: seen.append(gc.get_threshold()))
    finally:
        gc.set_threshold(*before)
    assert seen == [cli.GC_THRESHOLDS] and cli.GC_THRESHOLDS[0] >= 10_000


def test_a_run_freezes_its_imports_objects_once_as_it_starts(tmp_path):
    """An entry point's run freezes what its imports made (torch, Lightning: some 500,000
    objects the collector tracks) as it starts, once, so that the collection litlab runs at exit scans only what
    the run made (`environment.freeze_imports`; ~0.3 s less at every command's exit)."""
    probe = f"""
import gc, runpy, sys
from litlab import cli, environment
seen = []
freeze, at_exit = environment.freeze_imports, cli._freeze_at_exit
def freeze_probe():
    before = gc.get_freeze_count()
    freeze()
    seen.append(("freeze", before, gc.get_freeze_count(), "lightning.pytorch" in sys.modules))
def exit_probe():
    seen.append(("exit", len(gc.get_objects())))
    at_exit()
    print(seen, flush=True)
environment.freeze_imports, cli._freeze_at_exit = freeze_probe, exit_probe
sys.argv = ["src/train.py", "paths.log_dir={tmp_path}", "trainer.max_epochs=1",
            "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "test=false",
            "extras.print_config=false", "callbacks.rich_progress_bar=null"]
runpy.run_path("src/train.py", run_name="__main__")
"""
    done = python_c(probe, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert [step[0] for step in seen] == ["freeze", "exit"], seen
    [(_, before, after, lightning), (_, tracked_at_exit)] = seen
    assert before == 0 and after > 500_000 and lightning
    assert tracked_at_exit < after / 3  # without the freeze: every object of the imports
