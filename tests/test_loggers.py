"""`logger=many` writes CSV, TensorBoard and (offline, no account) W&B files into the run dir;
the README's `mlflow ui` command serves a `logger=mlflow` run."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from helpers.runs import ROOT, results, run_dirs


@pytest.mark.slow  # 14 s on 2 cores: .ci/run's second stage (make test stays within 5 minutes)
def test_every_logger_writes_into_the_run_dir(cli, tmp_path):
    cli(
        "train.py",
        "logger=many",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=4",
        env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )
    run = run_dirs(tmp_path / "logs")[-1]
    header = (run / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert {"val/acc", "val/f1", "train/loss", "epoch"} <= set(header.split(","))
    assert "model/params/total" in (run / "csv" / "hparams.yaml").read_text()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert list((run / "wandb").glob("offline-run-*/run-*.wandb"))


def readme_mlflow_ui_line() -> str:
    readme = (ROOT / "README.md").read_text()
    [line] = [ln for ln in readme.splitlines() if ln.startswith("mlflow ui ")]
    return line


def readme_mlflow_ui() -> list[str]:
    """The README's `mlflow ui ...` line, its trailing comment dropped."""
    return readme_mlflow_ui_line().split("#")[0].split()


@pytest.mark.slow  # a short run, then MLflow's server start (~40 s on a loaded 2-core machine)
def test_readme_mlflow_ui_command_serves_the_run(cli, tmp_path):
    """`logger=mlflow`, then the README's UI command from the folder holding `logs/` (the
    project root for a user; here tmp_path): the UI answers 200 and its REST search finds the
    run, in the experiment named after the task, with the run's test metric."""
    proc = cli("train.py", "logger=mlflow", "trainer.max_epochs=1", "trainer.limit_train_batches=4")
    test_acc = results(proc.stdout)[0]["test/acc"]
    command = readme_mlflow_ui()
    assert "sqlite:///logs/mlflow.db" in command
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), *command[1:], "--port", str(port)],
        cwd=tmp_path,  # the README runs it from the project root, which holds logs/
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"  # mlflow ui binds 127.0.0.1 by default
    try:
        deadline, status = time.time() + 240, None
        while time.time() < deadline and status is None:
            assert ui.poll() is None, "mlflow ui exited"
            try:
                with urllib.request.urlopen(url + "/", timeout=5) as r:
                    status = r.status
            except OSError:
                time.sleep(1)
        assert status == 200
        query = urllib.parse.urlencode({"experiment_name": "train"})
        with urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/get-by-name?{query}") as r:
            experiment = json.loads(r.read())["experiment"]["experiment_id"]
        search = urllib.request.Request(
            f"{url}/api/2.0/mlflow/runs/search",
            data=json.dumps({"experiment_ids": [experiment]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(search) as r:
            [run] = json.loads(r.read())["runs"]
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert metrics["test/acc"] == pytest.approx(test_acc, abs=1e-4)
        # the runs view the README links (experiment 1 in a fresh store), and the run page the
        # Files block prints, are routes of the UI this server ships (it opens on GenAI's)
        assert experiment == "1" and "/#/experiments/1/runs" in readme_mlflow_ui_line()
        page = re.search(r"mlflow run +http://127\.0\.0\.1:5000/#/runs/(\w+)", proc.stdout)
        assert page and page.group(1) == run["info"]["run_id"], proc.stdout[-2000:]
        with urllib.request.urlopen(url + "/") as r:
            scripts = re.findall(r'src="([^"]*static/js/main[^"]*\.js)"', r.read().decode())
        with urllib.request.urlopen(url + "/" + scripts[0].lstrip("./")) as r:
            bundle = r.read().decode()
        assert '"/experiments/:experimentId/runs"' in bundle and '"/runs/:runUuid"' in bundle
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # mlflow ui and the uvicorn it started
        ui.wait(timeout=60)


def test_mlflow_logger_leaves_the_process_environment_as_it_was(tmp_path, monkeypatch):
    """Lightning's mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI: left set, the next run
    of the process (the Python API, a test worker) and its children would log into this run's
    store. A user's own MLFLOW_TRACKING_URI is kept as it was."""
    from litlab.loggers import LocalMLFlowLogger

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first = LocalMLFlowLogger("train", save_dir=str(tmp_path / "a" / "mlflow"))
    assert first.experiment.get_experiment_by_name("train") is not None
    assert "MLFLOW_TRACKING_URI" not in os.environ
    second = LocalMLFlowLogger("train", save_dir=str(tmp_path / "b" / "mlflow"))
    assert second._tracking_uri.endswith(str(tmp_path / "b" / "mlflow.db"))

    theirs = f"sqlite:///{tmp_path / 'theirs.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", theirs)
    third = LocalMLFlowLogger("train", save_dir=str(tmp_path / "c" / "mlflow"))
    assert third._tracking_uri == theirs
    assert third.experiment.get_experiment_by_name("train") is not None
    assert os.environ["MLFLOW_TRACKING_URI"] == theirs


def test_files_block_links_the_mlflow_run_page(tmp_path, capsys):
    """A local `logger=mlflow` run's Files block gives the UI command and the run's own page:
    the UI opens on MLflow 3's GenAI view, where litlab's runs do not show."""
    from omegaconf import OmegaConf

    from litlab.runs.summary import summary

    (tmp_path / "mlflow_run_id.txt").write_text("0123abcd\n")
    cfg = OmegaConf.create(
        {
            "task_name": "train",
            "paths": {"output_dir": str(tmp_path)},
            "logger": {"mlflow": {"db": str(tmp_path / "mlflow.db")}},
        }
    )
    summary(cfg, {"test/acc": 0.5}, None)
    files = capsys.readouterr().out.split("\nFiles\n")[1].splitlines()
    assert f"  mlflow ui        --backend-store-uri sqlite:///{tmp_path / 'mlflow.db'}" in files
    assert "  mlflow run       http://127.0.0.1:5000/#/runs/0123abcd" in files
