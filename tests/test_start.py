"""Start here: the environment doctor and `make new-task` (a domain copied into a new task)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from litlab import scaffold

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
            "--log-dir",
            str(blocker / "logs"),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
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
    root = _repo_copy(tmp_path)
    before = _tree(root)
    for domain in scaffold.DOMAINS:
        scaffold.create(f"my{domain}", domain, root)
    after = _tree(root)
    added = set(after) - set(before)
    assert {k: after[k] for k in before} == before  # nothing outside the copies changed
    # one domain folder each (the datamodule, the net, their packages), three configs, a test:
    # the LightningModule is the source domain's, used as it is (docs/new_task.md, six ideas)
    assert len(added) == 8 * len(scaffold.DOMAINS)
    assert {k for k in added if k.startswith("src/")} == {
        f"src/litlab/domains/my{d}/{f}"
        for d in scaffold.DOMAINS
        for f in ("__init__.py", "data.py", "nets/__init__.py", f"nets/my{d}.py")
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
        "_target_: litlab.domains.mygraph.nets.mygraph.MygraphNet"
        in after["configs/model/mygraph.yaml"].decode()
    )
    # every copy trains at once (one multirun over the experiments, one batch each)
    done = subprocess.run(
        [
            sys.executable,
            str(root / "src" / "train.py"),
            "-m",
            "experiment=" + ",".join(f"my{domain}" for domain in scaffold.DOMAINS),
            "trainer.fast_dev_run=true",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for domain in scaffold.DOMAINS:  # each job wrote its metrics under the new task's name
        assert list((tmp_path / "logs").glob(f"my{domain}/multiruns/*/*/metrics.json")), domain


@pytest.mark.parametrize(
    "domain",
    [
        pytest.param("vision", marks=pytest.mark.slow),
        pytest.param("medical3d", marks=pytest.mark.slow),
        pytest.param("table", marks=pytest.mark.slow),
        pytest.param("graph", marks=pytest.mark.slow),
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
            "FROM='audio' is not a domain; valid: vision, medical3d, table, graph",
        ),
        (["", ""], "usage: make new-task NAME=mytask FROM=vision|medical3d|table|graph"),
    ],
)
def test_new_task_refuses_bad_names_in_one_line(capsys, args, says):
    before = _tree(ROOT / "configs")
    assert scaffold.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert _tree(ROOT / "configs") == before


def _doc_blocks() -> list[tuple[str, str]]:
    """docs/new_task.md's worked example of a new kind: (path, text) of each file."""
    import re

    doc = (ROOT / "docs" / "new_task.md").read_text()
    return re.findall(r"```(?:python|yaml)\n# file: (\S+)\n(.*?)```", doc, flags=re.DOTALL)


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
    """The doc's eight blocks are the files litlab ships (the doc cannot drift from the code)."""
    blocks = _doc_blocks()
    assert [rel for rel, _ in blocks][:1] == ["src/litlab/tasks/regression.py"]
    assert len(blocks) == 8
    for rel, text in blocks:
        assert (ROOT / rel).read_text() == text, f"docs/new_task.md's {rel} differs from the file"


def _new_kind_copy(tmp_path: Path) -> Path:
    """A copy of the project without the regression kind's files, then the doc's blocks
    written into it: a kind whose output is not a class, added as files only."""
    root = _repo_copy(tmp_path)
    blocks = _doc_blocks()
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
        "print(kind.name, kind.outputs)\n"
    )
    done = _run(root, "-c", probe, timeout=60)
    assert done.stdout.split() == ["regression", "litlab.tasks.regression:Values"], done.stderr
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
