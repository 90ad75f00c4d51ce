"""Start here: the environment doctor and `make new-task` (a domain copied into a new task)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.runs import require_shared

from litlab import scaffold
from litlab.domains import declarations

ROOT = Path(__file__).resolve().parents[1]


def test_doctor_reports_facts_and_fails_on_an_unwritable_log_dir(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "litlab.doctor",
            "--json",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,  # the logs folder as runs find it: LITLAB_LOG_DIR (the data's by its flag)
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT / "src"),
            "LITLAB_LOG_DIR": str(blocker / "logs"),
        },
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert {
        "versions",
        "devices",
        "loopback",
        "all_reduce",
        "folders",
        "datasets",
        "trackers",
    } <= set(report)
    assert report["versions"]["torch"] and report["versions"]["lightning"]
    assert report["devices"][0]["name"] == "cpu" and report["devices"][0]["matmul"]["ok"]
    assert report["all_reduce"]["gloo"]["ok"] and report["loopback"]["ok"]
    assert report["folders"]["data"]["ok"] and not report["folders"]["logs"]["ok"]
    assert report["datasets"]["digits"] is True
    # the one failing required check, as one line on stderr
    assert report["failures"] == [
        f"logs folder {blocker / 'logs'} is not writable: Not a directory"
    ]
    assert done.stderr.strip().splitlines() == [f"error: {report['failures'][0]}"]


def _repo_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for part in ("src", "configs"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tests").mkdir()
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow  # 13 s on 2 cores: .ci/run's second stage (make test stays within 5 minutes)
def test_new_task_copies_every_domain_and_touches_nothing_else(tmp_path):
    domains = list(declarations())  # every folder of src/litlab/domains
    assert {"vision", "medical3d", "segmentation2d", "table", "graph"} <= set(domains)
    data = tmp_path / "data"  # segmentation2d's copy reads the Hippocampus volumes
    shutil.copytree(require_shared("Hippocampus"), data / "Hippocampus")
    root = _repo_copy(tmp_path)
    before = _tree(root)
    for domain in domains:
        scaffold.create(f"my{domain}", domain, root)
    after = _tree(root)
    added = set(after) - set(before)
    assert {k: after[k] for k in before} == before  # nothing outside the copies changed
    # one domain folder each (its declaration, the datamodule, the nets module), three
    # configs, a test: the LightningModule is the source domain's, used as it is
    assert len(added) == 7 * len(domains)
    assert {k for k in added if k.startswith("src/")} == {
        f"src/litlab/domains/my{d}/{f}"
        for d in domains
        for f in ("__init__.py", "data.py", "nets.py")
    }
    assert (
        "_target_: litlab.domains.vision.module.ImageClassifier\n"
        in after["configs/model/myvision.yaml"].decode()
    )
    assert (
        "class MyvisionDataModule(VisionDataModule)"
        in after["src/litlab/domains/myvision/data.py"].decode()
    )
    assert (
        "_target_: litlab.domains.mygraph.nets.MygraphNet"
        in after["configs/model/mygraph.yaml"].decode()
    )
    # every copy trains at once (one multirun over the experiments, one batch each)
    done = subprocess.run(
        [
            sys.executable,
            str(root / "src" / "train.py"),
            "-m",
            "experiment=" + ",".join(f"my{domain}" for domain in domains),
            "trainer.fast_dev_run=true",
            f"paths.log_dir={tmp_path / 'logs'}",
            f"paths.data_dir={data}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for domain in domains:  # each job wrote its metrics under the new task's name
        assert list((tmp_path / "logs").glob(f"my{domain}/multiruns/*/*/metrics.json")), domain


@pytest.mark.parametrize(
    "domain",
    [
        pytest.param("vision", marks=pytest.mark.slow),
        pytest.param("medical3d", marks=pytest.mark.slow),
        pytest.param("table", marks=pytest.mark.slow),
        pytest.param("graph", marks=pytest.mark.slow),
        pytest.param("signal", marks=pytest.mark.slow),
    ],
)
def test_the_copied_test_passes(tmp_path, domain):
    root = _repo_copy(tmp_path)
    scaffold.create("mytask", domain, root)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(root / "tests" / "test_mytask.py"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed" in done.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["1task", "vision"], "NAME='1task' is not a valid task name"),
        (["my-task", "vision"], "NAME='my-task' is not a valid task name"),
        (["class", "graph"], "NAME='class' is not a valid task name"),
        (["digits", "vision"], "NAME=digits exists already (configs/data/digits.yaml)"),
        (["gnn", "graph"], "NAME=gnn exists already (configs/model/gnn.yaml)"),
        (["graph", "table"], "NAME=graph exists already (src/litlab/domains/graph/data.py)"),
        (
            ["mytask", "audio"],
            "FROM='audio' is not a domain; valid: graph, medical3d, segmentation2d, ",
        ),
        (["", ""], "usage: make new-task NAME=mytask FROM=graph|medical3d|segmentation2d|"),
    ],
)
def test_new_task_refuses_bad_names_in_one_line(capsys, args, says):
    before = _tree(ROOT / "configs")
    assert scaffold.run_scaffold(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert _tree(ROOT / "configs") == before


def test_every_domain_folder_declares_what_it_provides():
    """Each folder's `DOMAIN` names datamodules, modules and nets that exist, of kinds litlab
    knows (each module fits one of the datamodules' kinds), and what make new-task copies."""
    import importlib

    from litlab import tasks

    for name, domain in declarations().items():
        package = f"litlab.domains.{name}"

        def load(path: str, package=package):
            module, _, symbol = f"{package}.{path}".rpartition(".")
            return getattr(importlib.import_module(module), symbol)

        kinds = {load(path).kind for path in domain.datamodules}
        assert kinds <= set(tasks.kinds()), (name, kinds)
        for path in domain.modules:
            assert set(load(path).kinds) & kinds, (name, path)
        assert all(callable(load(path)) for path in domain.nets), name
        template = domain.template
        assert template.data in domain.datamodules and template.net in domain.nets, name
        for group, config in (("data", template.data_config), ("model", template.model_config)):
            assert (ROOT / "configs" / group / f"{config}.yaml").is_file(), (name, config)


def test_a_domain_folder_without_its_declaration_is_one_line_naming_it(tmp_path, monkeypatch):
    import litlab.domains
    from litlab.errors import UserError

    (tmp_path / "lesions").mkdir()
    (tmp_path / "lesions" / "__init__.py").write_text('"""No declaration."""\n')
    monkeypatch.setattr(litlab.domains, "__path__", [*litlab.domains.__path__, str(tmp_path)])
    with pytest.raises(UserError) as err:
        declarations()
    assert str(err.value).startswith(
        "src/litlab/domains/lesions/__init__.py declares no DOMAIN (a litlab.domains.Domain: "
    )


def _doc_blocks(example: int) -> list[tuple[str, str]]:
    """docs/new_task.md's worked example of a new kind: (path, text) of each file."""
    import re

    doc = (ROOT / "docs" / "new_task.md").read_text()
    section = doc.split(f"\n## Example {example}:", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:python|yaml)\n# file: (\S+)\n(.*?)```", section, flags=re.DOTALL)


#: docs/new_task.md's examples of a new kind: a new output (regression), new inputs (signals)
REGRESSION, SIGNALS = 2, 3


def test_the_six_ideas_of_docs_new_task_are_what_make_new_task_writes():
    """The page's table of ideas names exactly the files the copy writes (its test aside)."""
    import re

    doc = (ROOT / "docs" / "new_task.md").read_text()
    section = doc.split("## Six ideas", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d \|", line)]
    assert len(rows) == 6
    named = {p for row in rows for p in re.findall(r"`((?:src|configs)/[^`]+)`", row)}
    written = {str(p.relative_to(ROOT)) for p in scaffold.targets("mytask", ROOT)}
    assert named == {p for p in written if not p.startswith("tests/")}


def test_the_new_kind_of_docs_new_task_is_the_shipped_regression_kind():
    """The doc's nine blocks are the files litlab ships (the doc cannot drift from the code)."""
    blocks = _doc_blocks(REGRESSION)
    assert [rel for rel, _ in blocks][:1] == ["src/litlab/tasks/regression.py"]
    assert len(blocks) == 9
    for rel, text in blocks:
        assert (ROOT / rel).read_text() == text, f"docs/new_task.md's {rel} differs from the file"


def test_the_signal_kind_of_docs_new_task_is_four_files_under_src_and_shipped():
    """A kind with a new input type is at most four files under src/ (the kind, the folder's
    declaration, the datamodule, the net and module) plus its configs: the doc's blocks, which
    are the files litlab ships."""
    blocks = _doc_blocks(SIGNALS)
    under_src = [rel for rel, _ in blocks if rel.startswith("src/")]
    assert under_src[:1] == ["src/litlab/tasks/signal_classification.py"]
    assert len(under_src) <= 4 and len(blocks) == len(under_src) + 3
    for rel, text in blocks:
        assert (ROOT / rel).read_text() == text, f"docs/new_task.md's {rel} differs from the file"
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "src/litlab/domains/signal").rglob("*.py")}
    assert shipped <= set(under_src)  # the folder holds nothing the doc does not show


def _new_kind_copy(tmp_path: Path, example: int = REGRESSION) -> Path:
    """A copy of the project without the example kind's files, then the doc's blocks written
    into it: a kind added as files only."""
    root = _repo_copy(tmp_path)
    blocks = _doc_blocks(example)
    for rel, _ in blocks:
        (root / rel).unlink()
    before = _tree(root)
    for rel, text in blocks:
        assert rel not in before, f"the example edits {rel}: a new kind adds files only"
        (root / rel).write_text(text)
    return root


def _run(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
    )


def test_the_new_kind_of_docs_new_task_is_one_adapter(tmp_path):
    """In a copy of the project without it, the kind is found from its own file, read
    without torch, and a model of another kind on its data is refused in one line before
    anything is built."""
    root = _new_kind_copy(tmp_path)
    probe = (
        "import sys; from litlab import tasks\n"
        "kind = tasks.kind_of_data('litlab.domains.table.data.TableDataModule')\n"
        "assert tasks.kinds_of_model('litlab.domains.table.module.Regressor') == (kind.name,)\n"
        "assert 'torch' not in sys.modules\n"
        "print(kind.name, type(kind).__qualname__, kind.names_key)\n"
    )
    done = _run(root, "-c", probe, timeout=60)
    assert done.stdout.split() == ["regression", "Regression", "targets"], done.stderr
    refused = _run(
        root,
        "src/train.py",
        "experiment=diabetes",
        "model=cnn",
        f"paths.log_dir={tmp_path / 'logs'}",
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.count("\n") == 1 and "cannot train on data=table" in refused.stderr
    assert not list((tmp_path / "logs").glob("*/runs/*"))


def test_the_signal_kind_of_docs_new_task_is_found_from_its_files(tmp_path):
    """In a copy of the project without it, the signal kind is found from its own file, read
    without torch, with the folder's declaration; a model of another kind on its data is
    refused in one line before anything is built."""
    root = _new_kind_copy(tmp_path, SIGNALS)
    probe = (
        "import sys; from litlab import tasks; from litlab.domains import declarations\n"
        "kind = tasks.kind_of_data('litlab.domains.signal.data.SignalDataModule')\n"
        "assert tasks.kinds_of_model('litlab.domains.signal.module.SignalClassifier') == "
        "(kind.name,)\n"
        "assert 'torch' not in sys.modules\n"
        "print(kind.name, type(kind).__qualname__, declarations()['signal'].template.net)\n"
    )
    done = _run(root, "-c", probe, timeout=60)
    assert done.stdout.split() == [
        "signal_classification", "SignalClassification", "module.SignalCNN",
    ], done.stderr  # fmt: skip
    refused = _run(
        root, "src/train.py", "experiment=signal", "model=cnn", f"paths.log_dir={tmp_path / 'logs'}",
        timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.count("\n") == 1 and "cannot train on data=signal" in refused.stderr
    assert not list((tmp_path / "logs").glob("*/runs/*"))


@pytest.mark.slow  # run by .ci/run's second stage (keeps `make test` within 5 minutes)
def test_the_new_kind_of_docs_new_task_trains_exports_serves_and_quantizes(tmp_path):
    """docs/new_task.md's regression kind through every entry point, in a copy of the project
    that had none of its files: train (callbacks=inspect), eval, export (fp32 and int8,
    verified), one real HTTP request to src/serve.py, compress=quantize."""
    root = _new_kind_copy(tmp_path)
    logs = tmp_path / "logs"
    log_dir = f"paths.log_dir={logs}"
    done = _run(
        root, "src/train.py", "experiment=diabetes", "callbacks=inspect",
        "extras.print_config=false", log_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = next(logs.glob("diabetes/runs/*"))
    trained = json.loads((run / "metrics.json").read_text())
    assert trained["test/r2"] >= 0.40  # a linear model: about 0.45
    assert (run / "inspect" / "samples.png").is_file()  # the kind's residual plot
    best = next((run / "checkpoints").glob("epoch_*.ckpt"))
    done = _run(root, "src/eval.py", f"ckpt_path={best}", log_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    evaluated = next(logs.glob("eval/runs/*"))
    assert json.loads((evaluated / "metrics.json").read_text())["test/r2"] == pytest.approx(
        trained["test/r2"], abs=1e-6
    )
    done = _run(root, "src/export.py", f"ckpt_path={best}", "formats=[onnx,onnx_int8]", log_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    export = next(logs.glob("export/runs/*"))
    assert (export / "model.int8.onnx").is_file(), done.stdout  # within 2% of the r2
    _serve_and_check(root, export / "model.onnx", logs)
    done = _run(
        root, "src/compress.py", f"ckpt_path={best}", "compress=quantize", log_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(next(logs.glob("compress/runs/*/compress_report.json")).read_text())
    assert "int8 kept" in json.dumps(report)


def _serve_and_check(root: Path, model: Path, logs: Path) -> None:
    """The diabetes rows in the table's own units, served over HTTP by the copy's
    src/serve.py: one number per row, whose r2 against the targets is a trained model's; a
    short row is a 422 naming the 10 features."""
    from helpers import serve
    from sklearn.datasets import load_diabetes
    from sklearn.metrics import r2_score

    table = load_diabetes(scaled=False)
    server, url = serve.start(model, logs, root=root)
    try:
        predictions = []
        for start in range(0, len(table.data), 64):  # serve's max_batch rows per request
            body = json.dumps({"inputs": table.data[start : start + 64].tolist()}).encode()
            status, reply = serve.request(f"{url}/predict", body, "application/json")
            assert status == 200 and reply["targets"] == ["progression"], reply
            predictions += reply["predictions"]
        assert len(predictions) == len(table.target)
        assert r2_score(table.target, predictions) >= 0.40
        short = json.dumps({"inputs": [table.data[0, :9].tolist()]}).encode()
        status, reply = serve.request(f"{url}/predict", short, "application/json")
        assert status == 422 and "[10]" in reply["error"], reply
    finally:
        server.terminate()
        server.wait(30)


@pytest.mark.slow  # minutes: run by .ci/run's second stage
def test_the_signal_kind_of_docs_new_task_runs_every_feature(tmp_path):
    """docs/new_task.md's signal kind through every entry point, in a copy of the project that
    had none of its files, on the demo written as a file (`python -m ...data signals.npz`):
    the config schemas regenerated (as committed), train (callbacks=inspect), eval, export (fp32 and int8), real HTTP requests to
    src/serve.py, compress (distill and quantize, prune), federate, a 3-fold sweep."""
    root = _new_kind_copy(tmp_path, SIGNALS)
    logs, signals = tmp_path / "logs", tmp_path / "signals.npz"
    done = _run(root, "-m", "litlab.config.schemas")  # the doc's first step: generated
    assert done.returncode == 0, done.stderr[-2000:]
    for group in ("data", "model"):  # the kind's classes in them, as the shipped ones hold
        ours = (ROOT / "schemas" / f"{group}.json").read_text()
        assert (root / "schemas" / f"{group}.json").read_text() == ours, group
    done = _run(root, "-m", "litlab.domains.signal.data", str(signals))
    assert done.returncode == 0 and "X [600, 2, 128], y [600] (4 classes)" in done.stdout
    data = (f"paths.log_dir={logs}", f"data.path={signals}", "extras.print_config=false")
    done = _run(root, "src/train.py", "experiment=signal", "callbacks=inspect", *data)
    assert done.returncode == 0, done.stderr[-3000:]
    run = next(logs.glob("signal/runs/*"))
    trained = json.loads((run / "metrics.json").read_text())
    assert trained["test/acc"] >= 0.85  # 4 classes: chance is 0.25
    assert (run / "inspect" / "samples.png").is_file() and (run / "inspect" / "tsne.png").is_file()
    best = next((run / "checkpoints").glob("epoch_*.ckpt"))
    done = _run(root, "src/eval.py", f"ckpt_path={best}", f"paths.log_dir={logs}")
    assert done.returncode == 0, done.stderr[-3000:]
    evaluated = json.loads(next(logs.glob("eval/runs/*/metrics.json")).read_text())
    assert evaluated["test/acc"] == pytest.approx(trained["test/acc"], abs=1e-6)
    done = _run(root, "src/export.py", f"ckpt_path={best}", "formats=[onnx,onnx_int8]", data[0])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    export = next(logs.glob("export/runs/*"))
    assert (export / "model.int8.onnx").is_file(), done.stdout  # within 2% of the accuracy
    _serve_signals(root, export / "model.onnx", logs, signals)
    for steps in ("[distill,quantize]", "prune"):
        done = _run(root, "src/compress.py", f"ckpt_path={best}", f"compress={steps}", data[0])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = [json.loads(p.read_text()) for p in logs.glob("compress/runs/*/compress_report.json")]
    assert len(reports) == 2 and "int8 kept" in json.dumps(reports)
    # one Ray worker (clients one at a time): each worker imports torch and Lightning; two
    # clients, two rounds (a round that aggregates, then one from the aggregate), as the matrix's
    # federate cells: what this checks is that the kind federates
    one_worker = "federate.backend.init_args.num_cpus=1"
    rounds = ("federate.rounds=2", "federate.num_clients=2")
    done = _run(root, "src/federate.py", "experiment=signal", *rounds, one_worker, *data[:2])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (next(logs.glob("federate/runs/*")) / "global.ckpt").is_file()
    sweep = ("-m", "data.num_folds=3", "data.fold=range(3)", "trainer.max_epochs=3")
    done = _run(root, "src/train.py", *sweep[:1], "experiment=signal", *sweep[1:], *data)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list(logs.glob("signal/multiruns/*/*/metrics.json"))) == 3


def _serve_signals(root: Path, model: Path, logs: Path, signals: Path) -> None:
    """The demo signals in their raw units, served over HTTP by the copy's src/serve.py: a
    trained model's accuracy on them; a signal of another length is fitted, not refused; one
    of another channel count is a 422 naming the model's."""
    import numpy as np
    from helpers import serve

    data = np.load(signals)
    server, url = serve.start(model, logs, root=root)
    try:
        right = 0
        for start in range(0, len(data["y"]), 64):  # serve's max_batch signals per request
            body = json.dumps({"inputs": data["X"][start : start + 64].tolist()}).encode()
            status, reply = serve.request(f"{url}/predict", body, "application/json")
            assert status == 200 and reply["classes"] == ["0", "1", "2", "3"], reply
            right += int((np.asarray(reply["class_ids"]) == data["y"][start : start + 64]).sum())
        assert right / len(data["y"]) >= 0.85
        longer = json.dumps({"inputs": [np.tile(data["X"][0], 2).tolist()]}).encode()
        status, reply = serve.request(f"{url}/predict", longer, "application/json")
        assert status == 200 and len(reply["class_ids"]) == 1, reply
        one = json.dumps({"inputs": [data["X"][0, :1].tolist()]}).encode()
        status, reply = serve.request(f"{url}/predict", one, "application/json")
        assert status == 422 and "2 channel(s)" in reply["error"], reply
    finally:
        server.terminate()
        server.wait(30)


@pytest.mark.parametrize(
    "x, y, says",
    [
        ("1e39", None, "numbers finite in float32"),  # finite in float64, inf in the net
        ("text", None, "numbers finite in float32"),
        ("2d", None, "X [12, 4] and y [12]"),
        (None, "floats", "y must hold integer classes"),
        (None, "one class", "y must hold integer classes"),
    ],
)
def test_a_signal_file_that_is_no_signals_is_one_line(tmp_path, x, y, says):
    import numpy as np

    from litlab.domains.signal.data import read_signals
    from litlab.errors import UserError

    signals = {
        "1e39": np.full((12, 1, 4), 1e39),
        "text": np.full((12, 1, 4), "a"),
        "2d": np.zeros((12, 4)),
        None: np.zeros((12, 1, 4)),
    }[x]
    labels = {"floats": np.linspace(0, 1, 12), "one class": np.zeros(12, int)}.get(y)
    path = tmp_path / "signals.npz"
    np.savez(path, X=signals, y=np.arange(12) % 2 if labels is None else labels)
    with pytest.raises(UserError) as err:
        read_signals(path)
    assert str(err.value).startswith(f"data.path={path}: ") and says in str(err.value)
    assert "\n" not in str(err.value)
