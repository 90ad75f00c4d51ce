"""Kinds are classes (`litlab/tasks/`): every layer calls a kind's methods and reads its
declarations, none branches on a kind's name; the declarations import no torch, so they are
read in a second."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from litlab import tasks
from litlab.tasks.kind import COMPRESSION_STEPS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "litlab"
#: the kinds' package names them; a domain's datamodules and modules declare theirs with the
#: constants of litlab.tasks (or the kind class's `name`), never comparing or writing one out
OWNERS = ("tasks",)
DOMAINS = "domains"


def _kind_words() -> set[str]:
    names = set(tasks.kinds())
    return names | {n.upper() for n in names}


def _offences(path: Path, words: set[str], domain: bool = False) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "litlab.tasks" and not domain:
            found += [f"imports {a.name}" for a in node.names if a.name in words]
        if domain and isinstance(node, ast.Constant) and node.value in words:
            found.append(f"line {node.lineno}: writes the kind {node.value!r}")
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
    offences = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        top = path.relative_to(PACKAGE).parts[0]
        if top not in OWNERS and (found := _offences(path, words, domain=top == DOMAINS)):
            offences[str(path.relative_to(PACKAGE))] = found
    assert not offences, f"call the kind's methods (litlab.tasks) instead: {offences}"


def test_the_check_finds_branching():
    words = _kind_words()
    code = "from litlab.tasks import NODE_CLASSIFICATION\nif task == 'volume_segmentation': pass\n"
    path = Path(__file__).parent / "_kind_probe.py"
    try:
        path.write_text(code)
        assert len(_offences(path, words)) == 2
        path.write_text("kind = 'regression'\nif kind == NODE_CLASSIFICATION: pass\n")
        assert len(_offences(path, words, domain=True)) == 2  # a domain imports, never writes
    finally:
        path.unlink()


#: words of a kind's inputs and outputs: a layer that compares one of these branches on what a
#: kind's inputs or outputs are; it calls the kind's methods instead
DECLARED_WORDS = {"names_key", "json_words", "level", "graph_level"}


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
    answer holds, which figure is drawn are the kind's methods, never an `if` on its words."""
    offences = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in OWNERS
        and (found := _declaration_compares(path))
    }
    assert not offences, f"call the kind's methods (litlab.tasks) instead: {offences}"


def test_the_check_finds_branching_on_inputs_and_outputs(tmp_path):
    code = (
        "if kind.json_words == 'x': pass\n"
        "x = 1 if kind.names_key != 'classes' else 2\n"
        "if kind.batched_tensor: pass\n"  # a capability: allowed
    )
    path = tmp_path / "probe.py"
    path.write_text(code)
    assert len(_declaration_compares(path)) == 2


#: what a module, a batch or a net is, guessed from its attributes
GUESSED = {"module", "pl_module", "model", "student", "teacher", "batch", "net"}
#: uvicorn's own API: its worker processes import the app and protocol by such a name
UVICORN = {"serving/server.py"}
#: behaviour named by "package.module:function" text, imported when read
HOOK = re.compile(r"^[a-z_]+(\.[a-z_0-9]+)+:[A-Za-z_]\w*$")


def _dispatch(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        call = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hasattr"
        if call and getattr(node.args[0], "id", None) in GUESSED:
            found.append(f"line {node.lineno}: hasattr({node.args[0].id}, ...)")
        text = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if text and HOOK.match(node.value):
            found.append(f"line {node.lineno}: names code as {node.value!r}")
    return found


def test_no_layer_guesses_a_kind_or_names_code_in_text():
    """No `hasattr` on modules, batches or nets to guess what they are (their classes say it:
    LitModule's `scores`, the kind's methods), and no `"module:function"` hooks."""
    offences = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in UVICORN and (found := _dispatch(path))
    }
    assert not offences, offences


def test_the_check_finds_guessing(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(
        "if hasattr(pl_module, '_scores'): pass\n"
        "spec = 'litlab.export.domains:tensor_spec'\n"
        "if hasattr(os, 'getuid'): pass\n"  # the standard library's own capability: allowed
    )
    assert len(_dispatch(path)) == 2


def test_kinds_and_every_configs_task_are_read_without_torch():
    """Every data and model config's kind, read from the sources, and every domain folder's
    declaration: no torch import, not even numpy (a refusal is told before them)."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from litlab import tasks\n"
        "from litlab.config.rules import target_of\n"
        "for p in sorted(Path('configs/data').glob('*.yaml')):\n"
        "    tasks.kind_of_data(target_of(p))\n"
        "for p in sorted(Path('configs/model').glob('*.yaml')):\n"
        "    assert set(tasks.kinds_of_model(target_of(p))) <= set(tasks.kinds())\n"
        "from litlab.domains import declarations\n"
        "declarations()\n"
        "heavy = [m for m in ('torch', 'numpy') if m in sys.modules]\n"
        "assert not heavy, f'a kind or domain lookup imported {heavy}'\n"
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
    import litlab.callbacks.inspect as inspect_module

    kind = tasks.get(name)
    assert isinstance(kind, tasks.Kind) and kind.name == name
    assert not getattr(type(kind), "__abstractmethods__", None)
    if "samples" in kind.inspect:  # the figure the samples callback draws
        figure = kind.samples_figure(count=4)
        assert callable(figure.collect) and callable(figure.draw)
    callbacks = {
        getattr(cls, "inspects", "")
        for cls in vars(inspect_module).values()
        if isinstance(cls, type)
    }
    assert set(kind.inspect) <= callbacks, set(kind.inspect) - callbacks
    assert set(kind.compression) <= set(COMPRESSION_STEPS)
    assert kind.compress_metric is None or kind.compress_metric in kind.metrics  # logged on test
    assert kind.units is None or callable(kind.units.narrow)


def test_a_kind_registered_twice_or_lacking_a_method_is_one_line_naming_the_class():
    from litlab.errors import UserError
    from litlab.tasks.kind import Classes, Kind, register_kind
    from litlab.tasks.tensors import TensorInputs

    before = dict(tasks.kinds())

    class Twice(TensorInputs, Classes, Kind):
        name, metrics = "regression", ("acc",)

    class Partial(Classes, Kind):  # no input mixin: nothing decodes its requests
        name, metrics = "partial", ("acc",)

    with pytest.raises(UserError) as twice:
        register_kind(Twice)
    assert str(twice.value) == (
        "kind 'regression' is registered twice: by litlab.tasks.regression.Regression and by "
        f"{__name__}.{Twice.__qualname__}; give one another name"
    )
    with pytest.raises(UserError) as partial:
        register_kind(Partial)
    assert str(partial.value).startswith(
        f"kind class {__name__}.{Partial.__qualname__} lacks check_inputs, expected_inputs, "
        "export_spec, json, uploads, warm_up, zeros, batched_tensor: "
    )
    assert tasks.kinds() == before


def test_a_datamodule_of_another_kind_is_read_from_its_source():
    """Multiple inheritance and constants imported from litlab.tasks resolve statically."""
    from litlab.tasks import _MISSING, _static

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
    from litlab.tasks import _ABSENT, _MISSING, _static, declared

    progress = "litlab.callbacks.summary.ThrottledRichProgressBar"
    assert _static(progress, "inspects", outside=_ABSENT) is _ABSENT  # from the source alone
    assert _static(progress, "inspects") is _MISSING  # `kind`-style reads import it, as before
    assert declared(progress, "inspects") is None
    assert declared("litlab.callbacks.inspect.GradCAM", "inspects") == "gradcam"
    assert declared("litlab.callbacks.inspect.TaskCallback", "inspects") == ""
