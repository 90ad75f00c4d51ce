"""What report.py writes and reads, and what a served model tells any client (issue 46): an
output `report.html` that is not a file is refused in one line before the page is built; a run
file the page cannot show says why (over its limit, not a regular file), never "absent" for a
file that is there; GET /metadata holds what a client needs to call the model, not the run
config with the training machine's paths. Tiny files, in process (report.write_report, TestClient)."""

import json
import os
import time

import pytest
from helpers.onnx_files import GOOD, crafted_model
from helpers.refusals import refused

from litlab import report
from litlab.recipes import report as report_recipe


def tiny_run(root):
    run = root / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 42\n")
    return run


@pytest.mark.parametrize("kind", ["a folder", "a pipe", "a link"])
def test_a_report_html_that_is_no_file_is_refused_before_the_page_is_built(
    kind, tmp_path, monkeypatch
):
    run = tiny_run(tmp_path)
    out = run / "report.html"
    if kind == "a folder":
        out.mkdir()
        (out / "mine.txt").write_text("the user's")
    elif kind == "a pipe":
        os.mkfifo(out)
    else:
        (tmp_path / "elsewhere.html").write_text("the user's")
        out.symlink_to(tmp_path / "elsewhere.html")
    inode = os.lstat(out).st_ino
    monkeypatch.setattr(report, "build", lambda *a: pytest.fail("the page was built"))
    line, _ = refused("report", [f"path={run}"], report_recipe, tmp_path / "logs")
    assert line == (
        f"path={run}: its report.html is {kind}, not a file; the page is written there as a "
        "file: move that report.html away, or remove it"
    )
    assert os.lstat(out).st_ino == inode  # the user's folder, pipe or link, left as it was
    assert sorted(p.name for p in run.iterdir()) == [".hydra", "report.html"]
    if kind != "a pipe":  # what the folder or the link's target holds, untouched
        assert (out / "mine.txt" if kind == "a folder" else out).read_text() == "the user's"


def test_a_file_the_page_cannot_show_says_why(tmp_path):
    """40 MB of metrics.json is over the limit of a file shown (not "absent"); a pipe is never
    opened (the report would wait forever); a link out of the run is not followed."""
    from litlab.report import files

    run = tiny_run(tmp_path)
    with open(run / "metrics.json", "wb") as f:
        f.truncate(40 * 10**6)  # sparse: 40 MB that take no disk
    started = time.monotonic()
    page = report.write_report(run).read_text()
    assert "No final metrics: metrics.json is over its limit (38.1 MiB &gt; 32 MiB; not read)" in (
        page
    )
    (run / "metrics.json").unlink()
    os.mkfifo(run / "metrics.json")
    assert files.read_json_under(run, "metrics.json")[1] == (
        "metrics.json is not a regular file (a pipe; not read)"
    )
    (run / "metrics.json").unlink()
    (tmp_path / "secret.json").write_text("{}")
    (run / "metrics.json").symlink_to(tmp_path / "secret.json")
    assert files.read_json_under(run, "metrics.json")[1] == (
        "metrics.json is a link out of the folder reported on (not read)"
    )
    (run / "metrics.json").unlink()
    assert files.read_json_under(run, "metrics.json")[1] == "metrics.json is absent"
    assert time.monotonic() - started < 60


def test_metadata_answers_what_a_client_needs_without_the_run_config(tmp_path):
    from fastapi.testclient import TestClient

    from litlab.serving.app import create_app

    meta = {
        **GOOD,
        "metric": "test/acc",
        "config": {"paths": {"data_dir": "/home/alice/secret/data"}, "seed": 1},
        "checkpoint": "/home/alice/runs/2024/checkpoints/epoch_3.ckpt",
        "checkpoint_sha256": "ab" * 32,
        "litlab_version": "0.9.0",
        "torch_version": "2.9.0",
    }
    client = TestClient(create_app(crafted_model(tmp_path / "model.onnx", meta)))
    shown = client.get("/metadata").json()
    assert shown == {k: v for k, v in meta.items() if k not in ("config", "checkpoint")}
    assert "/home/alice" not in json.dumps(shown)
    assert list(shown)[:2] == ["kind", "classes"]
