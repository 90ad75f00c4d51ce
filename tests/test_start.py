"""Start here: the environment doctor and `make new-task` (a domain copied into a new task)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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
    assert len(added) == 7 * len(scaffold.DOMAINS)
    assert (
        "class MyvisionDataModule(VisionDataModule)"
        in after["src/litlab/data/myvision.py"].decode()
    )
    assert (
        "_target_: litlab.models.nets.mygraph.MygraphNet"
        in after["configs/model/mygraph.yaml"].decode()
    )
    # every copy trains at once (one multirun over the three experiments, one batch each)
    done = subprocess.run(
        [
            sys.executable,
            str(root / "src" / "train.py"),
            "-m",
            "experiment=myvision,mymedical3d,mygraph",
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
        (["gnn", "graph"], "NAME=gnn exists already (src/litlab/models/nets/gnn.py)"),
        (["mytask", "audio"], "FROM='audio' is not a domain; valid: vision, medical3d, graph"),
        (["", ""], "usage: make new-task NAME=mytask FROM=vision|medical3d|graph"),
    ],
)
def test_new_task_refuses_bad_names_in_one_line(capsys, args, says):
    before = _tree(ROOT / "configs")
    assert scaffold.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert _tree(ROOT / "configs") == before


def _new_kind_copy(tmp_path: Path) -> tuple[Path, Path]:
    """docs/new_task.md's table example, written file by file into a copy of the project,
    and a CSV table for it (three classes, two Gaussian blobs each, 5 features)."""
    import re

    import numpy as np

    root = _repo_copy(tmp_path)
    before = _tree(root)
    doc = (ROOT / "docs" / "new_task.md").read_text()
    blocks = re.findall(r"```(?:python|yaml)\n# file: (\S+)\n(.*?)```", doc, flags=re.DOTALL)
    assert len(blocks) == 5
    for rel, text in blocks:
        assert rel not in before, f"the example edits {rel}: a new kind adds files only"
        (root / rel).write_text(text)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    x = rng.normal(size=(600, 5)) + 2.0 * np.eye(3, 5)[y]
    table = tmp_path / "table.csv"
    np.savetxt(table, np.column_stack([x, y]), delimiter=",", header="a,b,c,d,e,label", comments="")
    return root, table


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
    """The kind is found from its own file, read without torch, and a model of another kind
    on its data is refused in one line before anything is built."""
    root, table = _new_kind_copy(tmp_path)
    probe = (
        "import sys; from litlab import tasks\n"
        "kind = tasks.kind_of_data('litlab.data.table.TableDataModule')\n"
        "assert tasks.kinds_of_model('litlab.models.table.TableClassifier') == (kind.name,)\n"
        "assert 'torch' not in sys.modules\n"
        "print(kind.name, kind.export_spec)\n"
    )
    done = _run(root, "-c", probe, timeout=60)
    assert done.stdout.split() == ["table_classification", "litlab.export.domains:tensor_spec"]
    refused = _run(
        root,
        "src/train.py",
        "experiment=table",
        f"data.path={table}",
        "model._target_=litlab.models.vision.ImageClassifier",
        f"paths.log_dir={tmp_path / 'logs'}",
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.count("\n") == 1 and "cannot train on" in refused.stderr
    assert not list((tmp_path / "logs").glob("*/runs/*"))


@pytest.mark.slow  # run by .ci/run's second stage (keeps `make test` within 5 minutes)
def test_the_new_kind_of_docs_new_task_trains_exports_serves_and_quantizes(tmp_path):
    """docs/new_task.md's table kind through every entry point, with no other file changed:
    train (callbacks=inspect), eval, export (fp32 and int8, verified), serve, compress."""
    root, table = _new_kind_copy(tmp_path)
    logs = tmp_path / "logs"
    log_dir = f"paths.log_dir={logs}"
    done = _run(
        root,
        "src/train.py",
        "experiment=table",
        f"data.path={table}",
        "trainer.max_epochs=5",
        "callbacks=inspect",
        "extras.print_config=false",
        log_dir,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = next(logs.glob("table/runs/*"))
    assert json.loads((run / "metrics.json").read_text())["test/acc"] > 0.8  # chance: 1/3
    for picture in ("confusion_test.png", "tsne.png"):  # the inspect callbacks that apply
        assert (run / "inspect" / picture).is_file(), picture
    best = next((run / "checkpoints").glob("epoch_*.ckpt"))
    done = _run(root, "src/eval.py", f"ckpt_path={best}", log_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run(root, "src/export.py", f"ckpt_path={best}", "formats=[onnx,onnx_int8]", log_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    onnx = next(logs.glob("export/runs/*/model.onnx"))
    rows = np.loadtxt(table, delimiter=",", skiprows=1)[:32]
    # the datamodule standardizes features with the whole table's mean and std
    full = np.loadtxt(table, delimiter=",", skiprows=1)[:, :-1]
    inputs = ((rows[:, :-1] - full.mean(0)) / full.std(0, ddof=1)).tolist()
    serve = (
        "import json, sys; from fastapi.testclient import TestClient\n"
        "from litlab.serving.app import create_app\n"
        f"with TestClient(create_app({str(onnx)!r})) as client:\n"
        "    reply = client.post('/predict', json={'inputs': json.loads(sys.argv[1])})\n"
        "print(json.dumps(reply.json()['class_ids']))\n"
    )
    done = _run(root, "-c", serve, json.dumps(inputs))
    assert done.returncode == 0, done.stderr[-3000:]
    predicted = np.array(json.loads(done.stdout))
    assert (predicted == rows[:, -1]).mean() > 0.8
    done = _run(
        root, "src/compress.py", f"ckpt_path={best}", "compress=quantize", "report.onnx=true",
        log_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(next(logs.glob("compress/runs/*/compress_report.json")).read_text())
    assert "quantize" in json.dumps(report)
    refused = _run(root, "src/compress.py", f"ckpt_path={best}", "compress=prune", log_dir)
    assert refused.returncode == 2 and "does not apply to table_classification" in refused.stderr
