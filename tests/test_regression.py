"""The regression kind (experiment=diabetes, a user's CSV table): a kind whose output is not a
class. Its output family in a served file (answers, metadata it must hold), its table reader's
refusals, its splits. Train, eval, export, serve, quantize end to end: tests/test_start.py (the
doc's copy) and the matrix row (tests/test_matrix.py)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers.onnx_files import crafted_model, deep, ood_entry
from helpers.runs import ROOT

from litlab.errors import UserError

TABLE = {  # the litlab metadata of a 10-feature regressor of one target, as files written
    # before the key `kind` hold it (`task`): still served
    "task": "regression",
    "targets": ["progression"],
    "input_names": ["x"],
    "inputs": {"x": {"shape": ["batch", 10], "dtype": "float32", "layout": "NF"}},
}


def _table_model(path, meta=TABLE, outputs: int = 1):
    weight = np.arange(10 * outputs, dtype=np.float32).reshape(10, outputs) / 10
    return crafted_model(path, meta, outputs=outputs, weight=weight, x_shape=("batch", 10))


def test_a_served_regressor_answers_one_number_per_row(tmp_path):
    from litlab.serving.runner import Runner

    runner = Runner(_table_model(tmp_path / "model.onnx"))
    x = np.stack([np.ones(10, np.float32), np.zeros(10, np.float32)])
    reply = runner.answer(runner.run(x), x)
    assert reply == {"predictions": [4.5, 0.0], "targets": ["progression"]}
    assert runner.ood is None and runner.kind.names_key == "targets"


@pytest.mark.parametrize(
    "meta,words",
    [
        ({k: v for k, v in TABLE.items() if k != "targets"}, "lacks targets"),
        (deep({"targets": ["a", "b"]}, TABLE), "targets has 2 names but the model outputs 1"),
        ({**TABLE, "classes": ["a"]} | {"targets": []}, "targets is empty"),
        ({**TABLE, "ood": ood_entry()}, "regression outputs carry no confidence"),
        (deep({"inputs.x.shape": ["batch", 10, 3]}, TABLE), "input 'x' is float32 of rank 2"),
    ],
)
def test_a_regressors_metadata_is_checked_in_one_line(meta, words, tmp_path):
    from litlab.serving.runner import Runner

    with pytest.raises(UserError) as err:
        Runner(_table_model(tmp_path / "model.onnx", meta))
    assert words in str(err.value) and "\n" not in str(err.value), err.value


def test_values_are_stratified_by_the_training_quintiles():
    """Federated partitions deal rows out by these, as classes."""
    from litlab.tasks.regression import Values

    train, held = Values.strata(np.arange(100.0), np.asarray([-5.0, 50.0, 500.0]))
    assert np.bincount(train).tolist() == [20] * 5 and held.tolist() == [0, 2, 4]


@pytest.mark.parametrize(
    "text,words",
    [
        ("a,b\n" + "1,x\n" * 20, "not a table of numbers"),
        ("a,b\n" + "1,nan\n" * 20, "expected at least 10 rows of finite numbers"),
        ("a,b\n" + "1,2\n" * 5, "5 rows of 2 columns"),
        ("a\n" + "1\n" * 20, "20 rows of 1 columns"),
        ("1,2\n" + "1,2\n" * 20, "its first row is numbers"),
        ("", "0 rows"),
    ],
)
def test_a_table_that_is_not_numbers_is_one_line(text, words, tmp_path):
    from litlab.domains.table.data import read_table

    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(UserError, match=words):
        read_table(path)


def test_the_splits_span_the_targets_and_folds_cover_every_row():
    from litlab.domains.table.data import TableDataModule

    dm = TableDataModule(seed=3)
    assert sum(len(v) for v in dm.split.values()) == 442
    for rows in dm.split.values():  # stratified by quintile: each split spans the range
        assert dm.y[rows].min() < 80 and dm.y[rows].max() > 250
    tests = [TableDataModule(num_folds=5, fold=k, seed=3).split["test"] for k in range(5)]
    assert sorted(np.concatenate(tests).tolist()) == list(range(442))
    dm.setup()
    first = dm.train_set
    dm.setup("test")  # once: a federated client's narrowed sets are never reset
    assert dm.train_set is first


def test_a_bad_table_is_refused_before_anything_is_written(tmp_path):
    """The table is read before the run starts: `litlab.train` (train.py's run in this
    process) raises its one line and leaves no run dir (train.py's exit 2 and one line as a
    process: tests/test_bad_inputs.py)."""
    from litlab import train
    from litlab.domains.table.data import TableDataModule

    with pytest.raises(UserError, match="data.path=.*none.csv is not a file"):
        TableDataModule.check_settings({"path": str(tmp_path / "none.csv")}, "data")
    text = tmp_path / "table.csv"
    text.write_text("a,b\n" + "1,x\n" * 20)
    logs = tmp_path / "logs"
    with pytest.raises(UserError, match="not a table of numbers") as err:
        train(["experiment=diabetes", f"data.path={text}", f"paths.log_dir={logs}"])
    assert "\n" not in str(err.value)
    assert not list(logs.glob("*/runs/*"))


def test_the_kinds_metrics_are_in_the_targets_units():
    """mae and rmse of the module's metrics read the values as given (no standardization)."""
    import torch

    from litlab.domains.table.module import Regressor
    from litlab.domains.table.nets import TableMLP

    net = TableMLP(2, [0.0, 0.0], [1.0, 1.0], [100.0], [50.0])
    module = Regressor(net, optimizer=None)
    metrics = module.make_metrics()
    metrics.update(torch.tensor([110.0, 90.0]), torch.tensor([100.0, 100.0]))
    got = {k: float(v) for k, v in metrics.compute().items()}
    assert got["mae"] == pytest.approx(10.0) and got["rmse"] == pytest.approx(10.0)
    # the loss is in standard units: an error of one target spread costs 1
    out = torch.tensor([[150.0]])
    assert float(module.task_loss(out, torch.tensor([100.0]))) == pytest.approx(1.0)
    assert json.loads(json.dumps(net.narrowed({"hidden": 32}, 0.25))) == {"hidden": 8}


@pytest.mark.slow  # a training subprocess
def test_a_users_csv_trains_to_its_linear_fit(tmp_path):
    """`experiment=diabetes data.path=table.csv`: a table that a linear model fits almost
    exactly is learnt (its columns on scales 0.1 to 100 apart, the target around 500)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4)) * [1, 10, 100, 0.1] + [0, 50, 1000, 0]
    y = x @ [2.0, 0.3, 0.01, 20.0] + 500 + rng.normal(size=400)
    table = tmp_path / "t.csv"
    np.savetxt(table, np.column_stack([x, y]), delimiter=",", header="a,b,c,d,y", comments="")
    logs = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "src/train.py", "experiment=diabetes", f"data.path={table}",
         f"paths.log_dir={logs}", "extras.print_config=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = next(logs.glob("t/runs/*"))  # filed by the table's name (issue 48)
    assert json.loads((run / "metrics.json").read_text())["test/r2"] > 0.9
