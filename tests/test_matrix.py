"""The feature x domain matrix (tests/feature_matrix.py): in the slow stage, one cell per
column on the digits CNN and one row of each other task kind; in `make test`, the runner
starts as a script. The whole matrix (docs/matrix.md) is written by hand."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, SHARED_DATA
from feature_matrix import COLUMNS, Row, main, rows
from helpers.runs import require_shared
from matrix_cells import Cell, Ctx, clean_env, git_status

pytestmark = pytest.mark.xdist_group("digits_run")

FAST = ["trainer.max_epochs=1", "trainer.limit_train_batches=4", "trainer.limit_val_batches=2"]


@pytest.fixture(scope="module")
def cells(digits_run, tmp_path_factory):
    """The cells of the digits row, run on the session's digits checkpoint with short
    trainings; module scope: serve uses the model.onnx that the export cell wrote."""
    work = tmp_path_factory.mktemp("matrix")
    row = next(r for r in rows(SHARED_DATA) if r.name == "digits_cnn")
    row.train, row.short = [*FAST], [*FAST]
    row.compress = [*FAST, "report.onnx=false", "report.batch_sizes=[1]", "report.budget_s=0.2"]
    special = {  # the whole default run would be minutes: the same commands, shorter
        "federate": Row("f", "f", ["federate.local_epochs=1", "trainer.limit_train_batches=2"]),
        "tune=lr": Row("t", "t", ["trainer.max_epochs=1", "tune.lr_find.num_training=20"]),
    }
    ctx = Ctx(work / "logs", clean_env(work / "data"), ckpt=str(digits_run.best))
    before = git_status()
    done: dict[str, Cell] = {}

    def cell(column: str) -> Cell:
        if column not in done:
            done[column] = COLUMNS[column](special.get(column, row), ctx)
        return done[column]

    yield cell
    assert git_status() == before, "a matrix cell wrote into the project"


# The digits row's cells, each a subprocess of 3-50 s, run in the slow stage: every column's
# feature has its own fast test on digits (test_export, test_serve, test_compress,
# test_inspect, test_options' eval, test_inspect's tune=lr, test_federated_runs), and
# `make test` stays within 5 minutes on 2 cores.
@pytest.mark.slow
@pytest.mark.parametrize("column", [c for c in COLUMNS if c != "train"])
def test_one_cell_per_column_on_the_digits_cnn(cells, column):
    if column == "serve":
        cells("export onnx")  # serve answers with the file that export wrote
    cell = cells(column)
    if column == "export tensorrt" and cell.status == "refused":
        assert "CUDA" in cell.text and "onnx" in cell.text  # one line naming what works here
        return
    assert cell.status == "ok", cell.text
    if column in ("eval", "export onnx", "export pt2", "export onnx_int8"):
        assert "test/acc 0.9" in cell.text  # the shared 12-epoch run's accuracy, through each
    if column == "distill":
        assert "eval.py loads it" in cell.text


@pytest.mark.slow  # a training subprocess; each row of the whole matrix runs it too
def test_the_train_cell_gives_a_checkpoint(tmp_path):
    from matrix_cells import train

    cell = train(Row("t", "t", FAST), Ctx(tmp_path / "logs", clean_env(tmp_path / "data")))
    assert cell.status == "ok" and cell.text.startswith("test/acc ")
    assert cell.path.endswith(".ckpt") and os.path.isfile(cell.path)


# one row per task kind besides the digits row's image classification (its cells: above); the
# whole matrix (11 rows, about 45 minutes on 2 cores) is written by hand into docs/matrix.md:
# `.venv/bin/python tests/feature_matrix.py` (.ci/run keeps CI well under 30 minutes)
KIND_ROWS = ("unet3d_phantoms", "resnet3d_phantoms", "gcn_sbm", "gin_mutag")


@pytest.mark.slow
def test_one_row_per_task_kind_has_no_failed_cell(tmp_path):
    """Every column on a row of each other task kind: each cell works or refuses in one line
    before any work, and nothing is written into the project."""
    require_shared("TUDataset")  # the GIN row's MUTAG
    out = tmp_path / "matrix.md"
    args = ["--rows", ",".join(KIND_ROWS), "--jobs", "2"]
    code = main([*args, "--results", str(tmp_path / "results.json"), "--out", str(out)])
    text = out.read_text()
    results = json.loads((tmp_path / "results.json").read_text())
    failed = {
        (row, column): cell["text"]
        for row, got in results.items()
        for column, cell in got.items()
        if cell["status"] == "FAILED"
    }
    assert not failed and code == 0, failed
    assert "**FAILED**" not in text
    for row in KIND_ROWS:  # run, not skipped
        assert results[row]["train"]["status"] == "ok", results[row]["train"]
        assert f"## {next(r.label for r in rows(SHARED_DATA) if r.name == row)}" in text


def test_the_runner_runs_as_a_script():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "feature_matrix.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "--rows" in proc.stdout
