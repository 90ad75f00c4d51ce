"""Task kinds are adapters (`litlab/tasks/`): every layer reads a kind's declarations, none
branches on a kind's name; the declarations import no torch, so they are read in a second."""

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from litlab import tasks

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "litlab"
#: a kind's own datamodule and module may use its name (they declare it); the nets of a
#: module that fits two kinds choose their pooling from it
OWNERS = ("tasks", "domains")


def _kind_words() -> set[str]:
    names = set(tasks.kinds())
    return names | {n.upper() for n in names}


def _offences(path: Path, words: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "litlab.tasks":
            found += [f"imports {a.name}" for a in node.names if a.name in words]
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                parts = operand.elts if isinstance(operand, (ast.Tuple, ast.List)) else [operand]
                for part in parts:
                    name = getattr(part, "id", None) or getattr(part, "attr", None)
                    value = part.value if isinstance(part, ast.Constant) else None
                    if name in words or value in words:
                        found.append(f"line {node.lineno}: compares with {name or value!r}")
    return found


def test_no_layer_branches_on_a_kind_name():
    words = _kind_words()
    offences = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in OWNERS and (found := _offences(path, words))
    }
    assert not offences, f"ask the kind's adapter (litlab.tasks) instead: {offences}"


def test_the_check_finds_branching():
    words = _kind_words()
    code = "from litlab.tasks import NODE_CLASSIFICATION\nif task == 'volume_segmentation': pass\n"
    path = Path(__file__).parent / "_kind_probe.py"
    try:
        path.write_text(code)
        assert len(_offences(path, words)) == 2
    finally:
        path.unlink()


#: what a kind declares as words (and its families' words): a layer that compares one of these
#: branches on what a kind is, its inputs or its outputs; it asks the kind's families instead
DECLARED_WORDS = {
    f.name
    for f in dataclasses.fields(tasks.TaskKind)
    if "str" in str(f.type) and "tuple" not in str(f.type) and f.name != "name"
} | {"names_key", "json_words", "level"}


def _declaration_compares(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                if isinstance(operand, ast.Attribute) and operand.attr in DECLARED_WORDS:
                    found.append(f"line {node.lineno}: compares .{operand.attr}")
    return found


def test_no_layer_branches_on_a_kinds_inputs_or_outputs():
    """Serving, export, compression, inspect, federated: what a request decodes to, what an
    answer holds, which figure is drawn are the kind's families' (litlab.tasks.inputs,
    litlab.tasks.outputs, litlab.tasks.figures), never an `if` on a declared word."""
    assert {"inputs", "outputs", "samples_figure", "export_spec"} <= DECLARED_WORDS
    offences = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in OWNERS
        and (found := _declaration_compares(path))
    }
    assert not offences, f"ask the kind's families (litlab.tasks) instead: {offences}"


def test_the_check_finds_branching_on_inputs_and_outputs(tmp_path):
    code = (
        "if kind.inputs == 'graph': pass\n"
        "x = 1 if family.names_key != 'classes' else 2\n"
        "if spec.samples_figure in views: pass\n"
        "if kind.input_family().batched_tensor: pass\n"  # a capability: allowed
    )
    path = tmp_path / "probe.py"
    path.write_text(code)
    assert len(_declaration_compares(path)) == 3


def test_kinds_and_every_configs_task_are_read_without_torch():
    """Every data and model config's kind, read from the sources: no torch import."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from litlab import tasks\n"
        "from litlab.config.rules import target_of\n"
        "for p in sorted(Path('configs/data').glob('*.yaml')):\n"
        "    tasks.kind_of_data(target_of(p))\n"
        "for p in sorted(Path('configs/model').glob('*.yaml')):\n"
        "    assert set(tasks.kinds_of_model(target_of(p))) <= set(tasks.kinds())\n"
        "assert 'torch' not in sys.modules, 'a kind lookup imported torch'\n"
        "print(len(tasks.kinds()))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 5


@pytest.mark.parametrize("name", sorted(tasks.kinds()))
def test_a_kinds_declarations_name_what_exists(name):
    import importlib
    import pkgutil

    import litlab.callbacks.inspect as inspect_package
    from litlab.federated import views

    kind = tasks.get(name)
    assert callable(kind.hook("export_spec"))
    from litlab.tasks.inputs import InputFamily
    from litlab.tasks.outputs import OutputFamily

    assert isinstance(kind.input_family(), InputFamily)
    assert isinstance(kind.output_family(), OutputFamily)
    if "samples" in kind.inspect:  # the figure the samples callback draws
        figure = kind.hook("samples_figure")(count=4)
        assert callable(figure.collect) and callable(figure.draw)
    callbacks = {
        getattr(cls, "inspects", "")
        for info in pkgutil.iter_modules(inspect_package.__path__)
        for cls in vars(importlib.import_module(f"litlab.callbacks.inspect.{info.name}")).values()
        if isinstance(cls, type)
    }
    assert set(kind.inspect) <= callbacks, set(kind.inspect) - callbacks
    assert set(kind.compression) <= set(tasks.kind.COMPRESSION_STEPS)
    assert kind.compress_metric is None or kind.compress_metric in kind.metrics  # logged on test
    assert kind.federated_units is None or kind.federated_units in views.UNITS


def test_a_datamodule_of_another_kind_is_read_from_its_source():
    """Multiple inheritance and constants imported from litlab.tasks resolve statically."""
    from litlab.tasks.static import _MISSING, _static

    seg = "litlab.domains.medical3d.data.PhantomSegmentationDataModule"
    assert _static(seg, "kind") == "volume_segmentation"
    assert _static("litlab.domains.graph.module.GNNClassifier", "kinds") == (
        "node_classification",
        "graph_classification",
    )
    assert _static("torch.nn.Linear", "task") is _MISSING  # other packages: imported instead


def test_an_attribute_litlab_defines_is_read_without_importing_lightning_bases():
    """`inspects` of the default callbacks (litlab classes on Lightning's) comes from their
    source: a base of another package cannot declare it (issue 50: no Lightning import)."""
    from litlab.tasks.static import _ABSENT, _MISSING, _static, declared

    progress = "litlab.callbacks.progress.ThrottledRichProgressBar"
    assert _static(progress, "inspects", outside=_ABSENT) is _ABSENT  # from the source alone
    assert _static(progress, "inspects") is _MISSING  # `kind`-style reads import it, as before
    assert declared(progress, "inspects") is None
    assert declared("litlab.callbacks.inspect.gradcam.GradCAM", "inspects") == "gradcam"
    assert declared("litlab.callbacks.inspect.base.TaskCallback", "inspects") == ""
