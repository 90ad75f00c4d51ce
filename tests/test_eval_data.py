"""The data a checkpoint is evaluated on (issue 46 item 4, issue 48 items 5 and 6): a table
given by a relative path is stored absolute and filed under its own name; eval.py finds it
from another folder with the training's metrics; `+data_overrides.KEY=` changes a stored data
key (applied, and recorded), checked before the stored config is; `data.*`/`+data.*` on
eval.py are refused saying so; evaluating never changes the run. On a table and on 2D
segmentation masks, trained in process (a second or two each)."""

import contextlib
import csv
import hashlib
import json
import shutil

import numpy as np
import pytest
import torch
import yaml
from helpers.masks import mask_folder

from litlab import evaluate, train
from litlab.errors import UserError
from litlab.runs.rebuild import load_run

QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null"]
SHORT = ["trainer.max_epochs=2", "trainer.limit_train_batches=3"]
REFUSED_DATA = (
    "src/eval.py builds the data from the checkpoint's stored config (the split it was trained "
    "on) and takes no data.* keys; change one with +data_overrides."
)

pytestmark = pytest.mark.xdist_group("eval_data")  # the module's runs are trained once


def write_table(path, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    y = x @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=rows)
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header="a,b,c,y", comments="")


def hashes(folder) -> dict:
    """sha256 of every file under a run dir (and the listing itself)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else ""
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    """`experiment=diabetes data.path=mydata/visits.csv`, run from the project folder."""
    root = tmp_path_factory.mktemp("project")
    (root / "mydata").mkdir()
    (root / "notebooks").mkdir()
    write_table(root / "mydata" / "visits.csv", 200, seed=0)
    write_table(root / "mydata" / "other.csv", 100, seed=1)
    args = ["experiment=diabetes", "data.path=mydata/visits.csv", f"paths.log_dir={root}/logs"]
    with contextlib.chdir(root):
        trained = train([*args, *QUIET, *SHORT])
    return root, trained


@pytest.fixture(scope="module")
def masks_run(tmp_path_factory):
    """A 2D segmentation run on a masks folder (24 images); another folder of 40 beside it."""
    root = tmp_path_factory.mktemp("masks")
    masks, other = mask_folder(root / "masks"), mask_folder(root / "other", count=40, seed=1)
    args = ["data=masks", "model=unet2d", f"data.root={masks}", "data.num_classes=3"]
    args += ["data.image_size=32", "model.net.channels=[8,16]", "model.net.strides=[2]"]
    trained = train([*args, f"paths.log_dir={root}/logs", *QUIET, *SHORT])
    return root, trained, other


def _eval(root, *args) -> tuple:
    result = evaluate([*args, f"paths.log_dir={root}/logs", "extras.print_config=false"])
    with open(result.run_dir / "predictions.csv") as f:
        return result, sum(1 for _ in csv.DictReader(f))


def test_a_relative_table_is_stored_absolute_and_filed_under_its_name(table_run):
    """Issue 48: the path as typed (mydata/visits.csv) named no file from notebooks/; the run
    landed in logs/diabetes/, tagged diabetes."""
    root, trained = table_run
    assert trained.run_dir.parent == root / "logs" / "visits" / "runs"
    stored = torch.load(trained.best_checkpoint, weights_only=True)["litlab_config"]
    assert stored["data"]["path"] == str(root / "mydata" / "visits.csv")
    assert (stored["task_name"], stored["tags"]) == ("visits", ["visits", "regression"])
    provenance = json.loads((trained.run_dir / "provenance.json").read_text())
    assert provenance["typed_paths"] == {"data.path": "mydata/visits.csv"}


def test_the_header_names_the_table_and_task_name_wins(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from litlab.config import data_paths
    from litlab.config.compose import compose
    from litlab.runs.summary import header

    monkeypatch.chdir(tmp_path)
    cfg = compose("train", ["experiment=diabetes", "data.path=my data/visits 2.csv"])
    data_paths.absolute(cfg)
    lines = header(cfg, None).splitlines()
    assert lines[0].startswith("visits_2: data=table model=regressor")
    assert lines[1] == f"  data        {tmp_path / 'my data' / 'visits 2.csv'}"
    given = compose("train", ["data=table", "model=regressor", "data.path=t.csv", "task_name=x"])
    assert given.task_name == "x"
    assert compose("train", ["experiment=diabetes"]).task_name == "diabetes"  # its own table
    # a sweep's jobs read other tables: they keep the recipe's name (one sweep folder)
    sweep = {"hydra": {"mode": "MULTIRUN"}, "data": {"path": "a.csv"}}
    assert OmegaConf.create({**sweep, "t": "${table_name:diabetes}"}).t == "diabetes"


def test_eval_from_another_folder_gives_the_trainings_metrics_and_changes_nothing(
    table_run, monkeypatch
):
    """Issue 48's number: `cd notebooks && python ../src/eval.py ckpt_path=...` on a run
    trained with a relative data.path: the same metrics; the run dir's files unchanged."""
    root, trained = table_run
    before = hashes(trained.run_dir)
    monkeypatch.chdir(root / "notebooks")
    result, rows = _eval(root, f"ckpt_path={trained.best_checkpoint}")
    for name in ("test/r2", "test/mae", "test/loss"):
        assert result.metrics[name] == pytest.approx(trained.metrics[name], abs=1e-6), name
    assert rows == 40  # the test fifth of visits.csv's 200 rows
    assert hashes(trained.run_dir) == before


def test_data_overrides_change_the_table_and_are_recorded(table_run, monkeypatch):
    """Issue 46: `+data.path=<another table>` evaluated the checkpoint's own split and
    recorded the other table; `+data_overrides.path=` (relative: from this folder) reads it."""
    root, trained = table_run
    before = hashes(trained.run_dir)
    monkeypatch.chdir(root / "notebooks")
    other = ["+data_overrides.path=../mydata/other.csv", "+data_overrides.batch_size=7"]
    result, rows = _eval(root, f"ckpt_path={trained.best_checkpoint}", *other)
    assert rows == 20  # the test fifth of other.csv's 100 rows
    assert result.metrics["test/r2"] != pytest.approx(trained.metrics["test/r2"], abs=1e-6)
    recorded = yaml.safe_load((result.run_dir / ".hydra" / "config.yaml").read_text())
    assert recorded["data_overrides"] == {"path": "../mydata/other.csv", "batch_size": 7}
    assert hashes(trained.run_dir) == before
    # what a checkpoint made from it (compress) stores: the file, from any folder
    rebuilt = load_run(trained.best_checkpoint, {"path": "../mydata/other.csv"})
    assert rebuilt.config.data.path == str(root / "mydata" / "other.csv")


@pytest.mark.parametrize(
    "given, first_line",
    [
        ("data.path={other}", "data.path={other}: " + REFUSED_DATA + "path={other}"),
        ("+data.path={other}", "+data.path={other}: " + REFUSED_DATA + "path={other}"),
        ("data=table", "data=table: " + REFUSED_DATA + "KEY=VALUE"),
        (
            "+data_overrides.sep=tab",
            (
                "unknown key data_overrides.sep (did you mean seed?): the checkpoint's data "
                "(TableDataModule) has no 'sep'; valid: batch_size, fold, id_column, num_folds, "
                "num_workers, path, persistent_workers, pin_memory, seed, test_fraction, val_fraction"
            ),
        ),
        (
            "+data_overrides.path={root}/gone.csv",
            "data_overrides.path={root}/gone.csv is not a file (a CSV table, or null: diabetes)",
        ),
    ],
)
def test_data_keys_on_eval_are_refused_saying_how(table_run, given, first_line):
    root, trained = table_run
    other = root / "mydata" / "other.csv"
    before, runs = hashes(trained.run_dir), sorted((root / "logs").glob("eval/runs/*"))
    with pytest.raises(UserError) as refused:
        _eval(root, f"ckpt_path={trained.best_checkpoint}", given.format(other=other, root=root))
    assert str(refused.value) == first_line.format(other=other, root=root)
    assert sorted((root / "logs").glob("eval/runs/*")) == runs  # no run dir left
    assert hashes(trained.run_dir) == before


def test_a_moved_table_is_named_with_the_override_that_reads_it(table_run, tmp_path):
    """The stored file is gone (a copy of the checkpoint naming another place): the refusal
    says how to point at it, and that override is applied before the stored config is
    checked (it failed the same way before)."""
    root, trained = table_run
    ckpt = torch.load(trained.best_checkpoint, weights_only=True)
    gone = tmp_path / "gone" / "visits.csv"
    ckpt["litlab_config"]["data"]["path"] = str(gone)
    moved = tmp_path / "moved.ckpt"
    torch.save(ckpt, moved)
    with pytest.raises(UserError) as refused:
        _eval(root, f"ckpt_path={moved}")
    assert str(refused.value) == (
        f"ckpt_path={moved}: its stored config is not valid: data.path={gone} is not a file "
        "(a CSV table, or null: diabetes); change it for this command with "
        "+data_overrides.path=VALUE"
    )
    here = root / "mydata" / "visits.csv"
    result, _ = _eval(root, f"ckpt_path={moved}", f"+data_overrides.path={here}")
    assert result.metrics["test/r2"] == pytest.approx(trained.metrics["test/r2"], abs=1e-6)


def test_a_2d_models_data_root_is_changed_by_data_overrides_only(masks_run):
    """`+data.root=` was accepted and left unused (the checkpoint's own folder evaluated);
    `+data_overrides.root=` evaluates the other folder's test split; the run is unchanged."""
    root, trained, other = masks_run
    before = hashes(trained.run_dir)
    ckpt = f"ckpt_path={trained.best_checkpoint}"
    with pytest.raises(UserError) as refused:
        _eval(root, ckpt, f"+data.root={other}")
    assert str(refused.value) == f"+data.root={other}: {REFUSED_DATA}root={other}"
    own, own_rows = _eval(root, ckpt)
    assert own.metrics["test/dice"] == pytest.approx(trained.metrics["test/dice"], abs=1e-6)
    result, rows = _eval(root, ckpt, f"+data_overrides.root={other}")
    assert (own_rows, rows) == (5, 8)  # the test fifth of 24 images, then of 40
    recorded = yaml.safe_load((result.run_dir / ".hydra" / "config.yaml").read_text())
    assert recorded["data_overrides"] == {"root": str(other)}
    assert hashes(trained.run_dir) == before
    shutil.rmtree(other)  # nothing of it is needed by the run
    again, _ = _eval(root, ckpt)
    assert again.metrics == own.metrics
