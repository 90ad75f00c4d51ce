"""The private APIs litlab reaches (litlab/compat/, tests/helpers/xdist_compat.py) still exist
in the installed versions; when an upgrade removes one, the failure names it and the version
it was checked against."""

import pytest
from helpers import xdist_compat

from litlab.compat import (
    CompatError,
    hydra,
    lightning,
    optuna,
    pyg,
    ray,
    torch,
    torch_pruning,
    uvicorn,
)


@pytest.mark.parametrize(
    "library",
    [lightning, hydra, optuna, torch, ray, uvicorn, pyg, torch_pruning],
    ids=lambda m: m.__name__,
)
def test_private_apis_still_exist(library):
    library.check()


def test_a_removed_private_api_is_named_with_the_checked_version(monkeypatch):
    from hydra.core import utils

    monkeypatch.delattr(utils, "_save_config")
    with pytest.raises(CompatError, match=r"hydra.core.utils._save_config .*hydra-core 1\.3\.8"):
        hydra.check()


def test_pytest_keeps_the_node_id_that_loadgroup_rewrites(request):
    xdist_compat.check(request.node)


# ----------------------------------------------------------------- the fence itself
# `_names` of the standard library that are public API, and litlab's own names that the scan
# cannot see defined (set through `__dict__`)
NOT_FOREIGN = {
    "_exit": "os._exit: the standard library's documented immediate exit",
    "_forward": "LitModule's own compiled-or-plain forward, set via __dict__ (models/base)",
}


def _own_private_names(trees) -> set[str]:
    """Names litlab itself defines: functions, classes, module names, arguments, imports, and
    attributes it assigns on `self`/`cls` (another object's attribute is not its own)."""
    import ast

    own = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif isinstance(node, ast.alias):
                own.add((node.asname or node.name).split(".")[0])
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                own.add(node.attr)
    return own


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _foreign_privates(path, tree, own) -> list[str]:
    import ast

    found = []
    for node in ast.walk(tree):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if node.attr not in own and node.attr not in NOT_FOREIGN:
                found.append(f"{where}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] in ("litlab", "hydra_plugins"):
                continue
            names = [*node.module.split("."), *(a.name for a in node.names)]
            found += [f"{where}: from {node.module} import {n}" for n in names if _private(n)]
        elif isinstance(node, ast.Import):
            found += [
                f"{where}: import {a.name}"
                for a in node.names
                if any(_private(part) for part in a.name.split("."))
            ]
    return found


def test_other_libraries_private_names_are_reached_only_in_compat():
    """The fence holds: outside litlab/compat/, no module imports another library's private
    module or name, nor reads or sets a `_name` on another library's object (one litlab does
    not define itself). Reaching one elsewhere fails here, naming file, line and name."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    files = sorted([*(src / "litlab").rglob("*.py"), *(src / "hydra_plugins").rglob("*.py")])
    trees = {path: ast.parse(path.read_text(), str(path)) for path in files}
    own = _own_private_names(trees.values())
    outside = [p for p in files if (src / "litlab" / "compat") not in p.parents]
    found = [hit for p in outside for hit in _foreign_privates(p.relative_to(src), trees[p], own)]
    assert found == [], "private names of other libraries outside litlab/compat/:\n" + "\n".join(
        found
    )


def _private_overrides(path, tree, module_name: str) -> list[str]:
    """Private methods a litlab class defines that another library's base class defines too:
    an override of that library's internals (the name is litlab's in the source, so the scan
    of names above cannot tell it from a helper of litlab's own)."""
    import ast
    import importlib

    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not node.bases:
            continue
        names = [
            f.name
            for f in node.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(f.name)
        ]
        if not names:
            continue
        cls = getattr(importlib.import_module(module_name), node.name)
        for name in names:
            owners = [
                base
                for base in cls.__mro__[1:]
                if name in vars(base) and not base.__module__.startswith("litlab")
            ]
            if owners:
                found.append(f"{path}: {node.name}.{name} overrides {owners[0].__qualname__}'s")
    return found


def test_no_class_outside_compat_overrides_another_librarys_private_method():
    """A litlab class that overrides a private method of another library's class (Lightning's
    CSV writer) depends on that library's internals as much as a call does: it lives in
    litlab/compat/ too, with the version it was checked against."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    found = []
    for path in sorted((src / "litlab").rglob("*.py")):
        if (src / "litlab" / "compat") in path.parents:
            continue
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(), str(path))
        found += _private_overrides(path.relative_to(src), tree, module)
    assert found == [], "\n".join(found)


def test_the_override_scan_finds_what_it_is_for(tmp_path, monkeypatch):
    import ast

    code = (
        "from lightning.pytorch.loggers.csv_logs import ExperimentWriter\n"
        "class Writer(ExperimentWriter):\n"
        "    def _record_new_keys(self):\n"
        "        return set()\n"
        "    def _mine(self):\n"
        "        return 1\n"
    )
    (tmp_path / "probe_override.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = _private_overrides("probe_override.py", ast.parse(code), "probe_override")
    assert found == ["probe_override.py: Writer._record_new_keys overrides _ExperimentWriter's"]


def test_the_fence_scan_finds_what_it_is_for():
    """The scan itself can fail: each way of reaching a private name is found."""
    import ast

    code = (
        "from hydra._internal.config_repository import ConfigRepository\n"
        "from lightning.fabric.utilities.logger import _flatten_dict\n"
        "import ray._private.services\n"
        "trainer._signal_connector.received_sigterm = True\n"
        "self._own = 1\n"
        "x = self._own\n"
    )
    tree = ast.parse(code)
    found = _foreign_privates("m.py", tree, _own_private_names([tree]))
    assert [f.split(": ", 1)[1] for f in found] == [
        "from hydra._internal.config_repository import _internal",
        "from lightning.fabric.utilities.logger import _flatten_dict",
        "import ray._private.services",
        "._signal_connector",
    ]


# ----------------------------------------------------------------- self.log's fast path
def _logged(values, quick: bool) -> dict:
    """What Lightning's result collection computes for `values` logged under one key."""
    import torch as th
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection

    if quick:
        lightning.quick_result_moves(install=True)
    try:
        results = _ResultCollection(training=False)
        results.batch_idx = 0
        for value, size in values:
            results.log("validation_step", "val/acc", th.tensor(value), batch_size=size)
        return {k: float(v) for k, v in results.metrics(on_step=False)["callback"].items()}
    finally:
        if quick:
            lightning.quick_result_moves(install=False)


def test_the_quick_move_gives_lightnings_results_and_moves_what_is_elsewhere(monkeypatch):
    """`_quick_to` skips Lightning's walk only when the states are on the device asked for:
    the same weighted mean either way; a state elsewhere (here: on the meta device, as a GPU
    tensor would be), one level inside a dict too, or another kind of call, goes to
    Lightning's method."""
    import torch as th
    from lightning.pytorch.trainer.connectors.logger_connector.result import (
        _Metadata,
        _ResultMetric,
    )

    values = [(0.5, 3), (0.25, 1), (1.0, 4)]
    assert _logged(values, quick=True) == _logged(values, quick=False) == {"val/acc": 0.71875}
    lightning.quick_result_moves(install=True)
    try:
        slow = []
        monkeypatch.setattr(
            lightning._QuickMoves, "original", lambda self, *a, **k: slow.append(a) or self
        )
        metric = _ResultMetric(_Metadata(fx="validation_step", name="x"), is_tensor=True)
        cpu = th.device("cpu")
        assert metric.to(cpu) is metric and metric.to("cpu", non_blocking=True) is metric
        assert slow == []
        metric.value = th.zeros((), device="meta")
        metric.to(cpu)
        metric.value = th.zeros(())
        metric._defaults["value"] = th.zeros((), device="meta")
        metric.to(cpu)
        metric._defaults["value"] = th.zeros(())
        metric.to(cpu, th.float64)  # a dtype too: Lightning's
        other = _ResultMetric(_Metadata(fx="validation_step", name="y"), is_tensor=False)
        other.to(cpu)  # a logged torchmetrics Metric: Lightning's
        assert len(slow) == 4
    finally:
        lightning.quick_result_moves(install=False)


def test_the_quick_move_is_installed_only_while_a_litlab_module_runs(tmp_path):
    """Plain Lightning in the same process (a notebook, bench/graph.py's baseline) keeps
    Lightning's own method: litlab's module installs it in setup, removes it in teardown."""
    import lightning as L
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

    from litlab.compat.lightning import _quick_to
    from litlab.domains.table.module import Regressor  # the smallest module litlab ships

    original = _ResultMetric.to
    seen = []

    class Look(L.Callback):
        def on_validation_epoch_end(self, trainer, module):
            seen.append(_ResultMetric.to is _quick_to)

    import torch as th

    class Net(th.nn.Linear):
        target_std = th.ones(1)

    module = Regressor(Net(3, 1), optimizer=lambda params: th.optim.SGD(params, lr=0.1))
    data = th.utils.data.TensorDataset(th.randn(16, 3), th.randn(16))
    loader = th.utils.data.DataLoader(data, batch_size=8)
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Look()],
        default_root_dir=tmp_path,
    )
    trainer.fit(module, loader, loader)
    assert seen == [True, True, True]  # the sanity check, then each epoch
    assert _ResultMetric.to is original
