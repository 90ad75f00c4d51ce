"""The private APIs litlab reaches (litlab/compat/, tests/helpers/xdist_compat.py) still exist
in the installed versions; when an upgrade removes one, the failure names it and the version
it was checked against."""

import time

import pytest
from helpers import xdist_compat
from helpers.runs import python_c

from litlab.compat import (
    CompatError,
    hydra,
    lightning,
    optuna,
    pyg,
    ray,
    rfc3987,
    torch,
    torch_pruning,
    uvicorn,
)


@pytest.mark.parametrize(
    "library",
    [lightning, hydra, optuna, torch, ray, uvicorn, pyg, torch_pruning, rfc3987],
    ids=lambda m: m.__name__,
)
def test_private_apis_still_exist(library):
    """Each compat module's `check_<library>` (the library's name is the module's)."""
    getattr(library, f"check_{library.__name__.rsplit('.', 1)[1]}")()


#: a probe's expression: whether rfc3987-syntax's grammar has been built in its process
BUILT = "'rfc3987_syntax.syntax_helpers' in sys.modules"


def printed(*lines: str, path=()) -> list[str]:
    """The words a fresh interpreter prints running `lines` (with `path` first on sys.path)."""
    done = python_c("\n".join(lines), *path)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_jsonschema_builds_its_iri_grammar_when_an_iri_is_first_checked_not_at_import():
    """`import litlab` before jsonschema (MONAI and Ray import it): the 1.8-3.4 s grammar of
    rfc3987-syntax is not built at import, and jsonschema's `iri` checks answer as before."""
    words = printed(
        "import sys, litlab, jsonschema",
        f"before = {BUILT}",
        "iri = jsonschema.Draft7Validator(",
        "    {'format': 'iri'}, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)",
        f"print(before, iri.is_valid('http://example.com/a'), iri.is_valid('http://a b/'), {BUILT})",
    )
    assert words == ["False", "True", "False", "True"]


def test_looking_a_name_up_in_every_module_does_not_build_the_iri_grammar():
    """pickle's and cloudpickle's `whichmodule` ask every module of `sys.modules` for the name
    of a function they pickle (a parallel sweep's forked job pickles its result so: the grammar
    cost each job 1.6 s): the stand-in answers for a name the package lacks without building
    it, and still gives the package's own names."""
    words = printed(
        "import pickle, sys, litlab, jsonschema",
        "def task(): pass",
        "task.__module__ = None",
        "package = sys.modules['rfc3987_syntax']",
        f"found = pickle.whichmodule(task, 'task'), hasattr(package, 'task'), {BUILT}",
        f"print(*found, package.RFC3987_SYNTAX_PARSER_TYPE, {BUILT})",
    )
    assert words == ["__main__", "False", "False", "earley", "True"]


@pytest.mark.parametrize(
    "init, names",
    [
        (
            "from .helpers import *\nfrom .sub import *\nA = 1\n",
            {"A", "fast", "X", "helpers", "sub"},
        ),
        ("try:\n    from .helpers import fast\nexcept ImportError:\n    fast = None\n", None),
        ("if True:\n    B = 1\n", None),
        ("def __getattr__(name):\n    return name\n", None),
        ("from os.path import *\n", None),
        ("from .gone import *\n", None),  # a file it cannot read: no error, no claim
        ("A, B = 1, 2\n", None),
        ("def broken(:\n", None),
    ],
)
def test_the_stand_in_claims_a_name_missing_only_where_the_files_say_it_plainly(
    init, names, tmp_path
):
    """What the rfc3987 stand-in reads of a package (another version may be laid out
    otherwise): the names its files bind plainly, else None (then every name imports the
    real package, which answers), never an error out of an attribute lookup."""
    from litlab.compat.rfc3987 import _names

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("X = 1\n_hidden = 2\n")
    (tmp_path / "helpers.py").write_text("def fast():\n    pass\n")
    (tmp_path / "__init__.py").write_text(init)
    assert _names(str(tmp_path)) == names


def test_rays_processes_run_litlabs_sitecustomize_then_the_one_it_hides(tmp_path):
    """The folder that leads the PYTHONPATH of Ray's processes (federated/processes.py): a
    process that imports jsonschema there does not build the IRI grammar, and a
    sitecustomize further on the path (a distribution's, coverage's) still runs, also where a
    link to the folder is on the path too (it once ran itself until a RecursionError)."""
    from litlab.federated.processes import RAY_SITE

    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.HIDDEN_RAN = True\n")
    (tmp_path / "link").symlink_to(RAY_SITE)
    words = printed(
        "import builtins, sys, jsonschema",
        f"print(getattr(builtins, 'HIDDEN_RAN', False), {BUILT})",
        path=(RAY_SITE, tmp_path / "link", tmp_path),
    )
    assert words == ["True", "False"]


def test_a_removed_private_api_is_named_with_the_checked_version(monkeypatch):
    from hydra.core import utils

    monkeypatch.delattr(utils, "_save_config")
    with pytest.raises(CompatError, match=r"hydra.core.utils._save_config .*hydra-core 1\.3\.8"):
        hydra.check_hydra()


def test_pytest_keeps_the_node_id_that_loadgroup_rewrites(request):
    xdist_compat.check(request.node)


# ----------------------------------------------------------------- the fence itself
def _scan(files, src):
    """Every reach of another library's private name in `files` (helpers/fence.py)."""
    import ast

    from helpers import fence

    trees = {path: ast.parse(path.read_text(), str(path)) for path in files}
    defs = fence.definitions(src, files, trees)
    outside = [p for p in files if (src / "litlab" / "compat") not in p.parents]
    return [
        hit
        for p in outside
        for hit in fence.reaches(p.relative_to(src), fence.module_name(src, p), trees[p], defs)
    ]


def test_other_libraries_private_names_are_reached_only_in_compat():
    """The fence holds: outside litlab/compat/, no module imports another library's private
    module or name, names one in a string, reads or sets a `_name` on another library's object
    (directly or through getattr and its kin), or defines one its other-library base classes
    define (an override of their internals). A `_name` is litlab's only where a litlab module
    or class defines it. Reaching one elsewhere fails here, naming file, line and name."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    files = sorted([*(src / "litlab").rglob("*.py"), *(src / "hydra_plugins").rglob("*.py")])
    found = _scan(files, src)
    assert found == [], "private names of other libraries outside litlab/compat/:\n" + "\n".join(
        found
    )


PROBE = """\
import ast
import hydra
from hydra._internal.config_repository import ConfigRepository
from lightning.fabric.utilities.logger import _flatten_dict
import ray._private.services
from lightning.pytorch.loggers import CSVLogger
from torch import nn

BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
SAMPLER = "optuna.samplers._tpe.sampler"
FILE = "_fp32.onnx"


def reach(trainer, sampler, tree):
    trainer._signal_connector.received_sigterm = True
    getattr(sampler, "_rng", None)
    hasattr(sampler, "_random_sampler")
    setattr(trainer, "_own_helper", 1)  # litlab defines it below: its own
    nn.modules.conv._ConvNd
    hydra._internal
    return tree._fields


def _own_helper():
    return 1


class Logger(CSVLogger):
    def experiment(self):
        if self._experiment is None:
            self._experiment = 1
        self._mine = 2
        return self._mine


class Mixin:
    def _prepare_streams(self):
        super()._prepare_streams()
"""


def test_the_fence_scan_finds_what_it_is_for(tmp_path, monkeypatch):
    """The scan itself can fail: each way of reaching a private name is found, litlab's own
    names (a module's, a class's own attribute) are not, and an attribute a litlab class sets
    that its Lightning base class defines is Lightning's."""
    from lightning.pytorch.profilers import SimpleProfiler

    package = tmp_path / "src" / "litlab_probe"
    package.mkdir(parents=True)
    (package / "probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    from helpers import fence

    monkeypatch.setattr(fence, "OWN_ROOTS", ("litlab_probe",))
    from litlab_probe import probe

    # a subclass elsewhere in litlab makes the mixin's `_prepare_streams` an override
    printed = type("Printed", (probe.Mixin, SimpleProfiler), {"__module__": "litlab_probe.x"})
    found = [f.split(": ", 1)[1] for f in _scan([package / "probe.py"], tmp_path / "src")]
    assert found == [
        "from hydra._internal.config_repository import _internal",
        "from lightning.fabric.utilities.logger import _flatten_dict",
        "import ray._private.services",
        "'hydra._internal.core_plugins.basic_sweeper.BasicSweeper'",
        "'optuna.samplers._tpe.sampler'",
        "._signal_connector",
        "getattr _rng",
        "hasattr _random_sampler",
        "._ConvNd of torch.nn.modules.conv",
        "._internal of hydra",
        "Logger._experiment overrides lightning.pytorch.loggers.csv_logs.CSVLogger's",
        "._experiment (defined by lightning.pytorch.loggers.csv_logs.CSVLogger)",
        "._experiment (defined by lightning.pytorch.loggers.csv_logs.CSVLogger)",
        "Mixin._prepare_streams overrides lightning.pytorch.profilers.profiler.Profiler's",
        "._prepare_streams (defined by lightning.pytorch.profilers.profiler.Profiler)",
    ]
    assert printed.__mro__[1] is probe.Mixin


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


# ------------------------------------------------- one compose where hydra.mode cannot be set
def _composes(monkeypatch, capfd, tmp_path, overrides, flags=()) -> tuple[int, str, int]:
    """(exit code, stderr, number of Hydra composes) of `train.py overrides`, in process."""
    from helpers.runs import run_in_process
    from hydra._internal.hydra import Hydra

    composes, compose = [], Hydra.compose_config
    monkeypatch.setattr(
        Hydra, "compose_config", lambda self, *a, **k: composes.append(1) or compose(self, *a, **k)
    )
    code, err = run_in_process("train.py", overrides, tmp_path / "logs", capfd, flags)
    return code, err, len(composes)


def test_a_command_composes_its_config_once_where_nothing_can_set_hydra_mode(
    monkeypatch, capfd, tmp_path
):
    """Hydra's second compose (`get_mode`, only to read `hydra.mode`) is skipped for litlab's
    configs; with `hydra.mode` in an override, Hydra's own `get_mode` composes and honours it."""
    code, err, composes = _composes(monkeypatch, capfd, tmp_path, ["seed=-5"])
    assert (code, composes) == (2, 1) and "seed=-5" in err, err
    code, err, composes = _composes(
        monkeypatch, capfd, tmp_path, ["hydra.mode=MULTIRUN", "seed=1,-5"]
    )
    assert (code, composes) == (2, 2), err
    assert "job 1 of the sweep (seed=-5)" in err, err  # swept, as the mode says
    assert not (tmp_path / "logs" / "train").exists()


def test_a_config_file_that_sets_hydra_mode_is_still_read(monkeypatch, capfd, tmp_path):
    """An experiment of the user's (`--config-dir`) that sets `hydra.mode: MULTIRUN` sweeps
    without -m, as in Hydra: the file is seen and Hydra's own get_mode runs."""
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "multi.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n"
    )
    flags = ("--config-dir", str(tmp_path / "mine"))
    code, err, composes = _composes(
        monkeypatch, capfd, tmp_path, ["experiment=multi", "seed=1,-5"], flags
    )
    assert (code, composes) == (2, 2), err
    assert "job 1 of the sweep (seed=-5)" in err, err


@pytest.mark.parametrize(
    ("text", "group", "may"),
    [
        ("model_checkpoint:\n  mode: ${model.monitor_mode}\n", "callbacks", False),
        ("dp:\n  mode: none\n", "", False),
        ("# @package _global_\nhydra:\n  mode: MULTIRUN\n", "experiment", True),
        ("# @package _global_\nhydra: {mode: RUN}\n", "experiment", True),
        ("mode: MULTIRUN\n", "hydra", True),  # a file of the hydra group
        ("# @package hydra\nmode: ${oc.env:MODE}\n", "local", True),
        ("defaults:\n  - mine@hydra: x\n", "", True),  # a config placed in the hydra package
        ("run:\n  dir: ${hydra.mode}\n", "", True),
        ("hydra:\n  searchpath: [file:///elsewhere]\n", "", True),  # its files are not seen
        ("mode: [unclosed\n", "", True),  # what does not parse may
        ("sweeper:\n  mode: grid\n", "hydra/sweeper", False),  # hydra.sweeper.mode
    ],
)
def test_which_config_files_may_set_hydra_mode(text, group, may):
    assert hydra._text_may_set_mode(text, group) is may


def test_the_scan_of_config_files_survives_hostile_ones(tmp_path):
    """A folder named like a YAML file, and YAML aliases nested nine deep (10^9 paths, 70
    bytes a level): the scan answers at once (a folder: 'may', so Hydra's own get_mode runs)."""
    (tmp_path / "odd.yaml").mkdir()
    assert hydra._file_may_set_mode(tmp_path / "odd.yaml", tmp_path) is True
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join([*lines, "model_checkpoint:", "  mode: max"]) + "\n")
    start = time.process_time()
    assert hydra._file_may_set_mode(bomb, tmp_path) is False
    assert time.process_time() - start < 1.0


def test_a_search_path_of_many_folders_is_not_scanned(tmp_path):
    """`--config-dir ~`: past SCAN_FOLDERS folders the scan stops and Hydra's own get_mode
    runs, instead of a walk of the whole tree before every command."""
    for i in range(hydra.SCAN_FOLDERS):
        (tmp_path / f"d{i}").mkdir()
    assert hydra._config_files(tmp_path) is None
    assert len(hydra._config_files(tmp_path / "d0")) == 0
    (tmp_path / "d0" / "x.yaml").write_text("a: 1\n")
    assert hydra._config_files(tmp_path / "d0") == [tmp_path / "d0" / "x.yaml"]


def test_hydra_keeps_the_functions_the_composition_cache_stands_in_for():
    from helpers import compose_cache

    compose_cache.check()


def test_the_debugger_check_answers_as_hydras():
    """tests/helpers/debugger_check.py, active here, and Hydra's own: the same answer in a test
    worker (no debugger), and with a trace function set (as a debugger or coverage sets one)."""
    import sys

    from helpers import debugger_check
    from hydra._internal import utils

    assert utils.is_under_debugger is debugger_check.is_under_debugger
    previous = sys.gettrace()  # None, unless coverage.py traces this worker
    assert debugger_check.hydras() is debugger_check.is_under_debugger() is (previous is not None)
    sys.settrace(lambda *args: None)
    try:
        answers = debugger_check.hydras(), debugger_check.is_under_debugger()
    finally:
        sys.settrace(previous)
    assert answers == (True, True)
