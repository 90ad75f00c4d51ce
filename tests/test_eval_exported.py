"""`eval.py model_path=FILE.onnx`: the file src/export.py ships is scored on its run's split
(rebuilt from the config in its metadata) with the checkpoint's metrics and predictions.csv;
an fp32 file's figures are its checkpoint's, an int8 file's its own. Bad files are one line,
nothing written, and nothing a file's metadata names is imported. Digits here; one run per
other task kind is `slow`."""

import json
import sys

import numpy as np
import pandas as pd
import pytest
from helpers.runs import TINY_SEG, fingerprint, run_dirs
from helpers.serve import export_digits

import litlab
from litlab.errors import UserError

# one worker runs this module and the other users of digits_run (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("digits_run")


@pytest.fixture(scope="module")
def digits(digits_run, tmp_path_factory):
    return export_digits(digits_run, tmp_path_factory)


def evaluate(log_dir, *overrides):
    """litlab.evaluate as `eval.py` runs it: (metrics, predictions.csv, the run dir)."""
    result = litlab.evaluate([f"paths.log_dir={log_dir}", *overrides])
    assert json.loads((result.run_dir / "metrics.json").read_text()) == result.metrics
    return result.metrics, pd.read_csv(result.run_dir / "predictions.csv"), result.run_dir


def same_predictions(rows: pd.DataFrame, ckpt_rows: pd.DataFrame, atol: float) -> None:
    """The columns and rows of the checkpoint's predictions.csv, numbers within `atol`."""
    assert list(rows.columns) == list(ckpt_rows.columns)
    assert len(rows) == len(ckpt_rows)
    numbers = ckpt_rows.select_dtypes("number").columns
    assert np.allclose(rows[numbers], ckpt_rows[numbers], atol=atol, rtol=0)
    text = [c for c in ckpt_rows.columns if c not in numbers]
    assert rows[text].equals(ckpt_rows[text])


def test_an_fp32_file_scores_as_its_checkpoint(digits_run, digits, tmp_path):
    """The same metric names and values (within float tolerance) and the same predictions as
    `eval.py ckpt_path=` of the checkpoint it came from; the export dir is left as it was."""
    export_dir = digits["onnx"].parent
    before = fingerprint(export_dir)
    metrics, rows, _ = evaluate(tmp_path, f"model_path={digits['onnx']}")
    ckpt = json.loads((digits_run.eval / "metrics.json").read_text())
    assert metrics == pytest.approx(ckpt, rel=1e-5, abs=1e-6)
    assert set(metrics) == {"test/acc", "test/f1", "test/loss"}
    same_predictions(rows, pd.read_csv(digits_run.eval / "predictions.csv"), atol=1e-5)
    assert fingerprint(export_dir) == before


def test_an_int8_file_scores_its_own_figures_on_the_same_split(digits_run, digits, tmp_path):
    """The int8 file's own outputs (not its checkpoint's), its accuracy the one export.py
    judged it by, on the same 360 test digits with the same columns."""
    metrics, rows, _ = evaluate(tmp_path, f"model_path={digits['int8']}", "threads=1")
    ckpt_rows = pd.read_csv(digits_run.eval / "predictions.csv")
    judged = json.loads((digits["onnx"].parent / "export_report.json").read_text())
    assert metrics["test/acc"] == pytest.approx(judged["formats"]["onnx_int8"]["metric"], abs=1e-6)
    assert set(metrics) == {"test/acc", "test/f1", "test/loss"}
    assert list(rows.columns) == list(ckpt_rows.columns) and len(rows) == 360
    assert (rows.target == ckpt_rows.target).all()
    assert (rows.pred == ckpt_rows.pred).mean() > 0.95
    assert (rows.confidence - ckpt_rows.confidence).abs().max() > 1e-4  # int8's own outputs


def _crafted(src, dst, change):
    """A copy of the ONNX file `src` whose metadata `change` edits (a dict of JSON texts)."""
    import onnx  # here, not at collection in every worker

    model = onnx.load(str(src))
    props = {p.key: p.value for p in model.metadata_props}
    change(props)
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(dst))
    return dst


def _config(edit):
    def change(props):
        config = json.loads(props["config"])
        edit(config)
        props["config"] = json.dumps(config)

    return change


CANARY = "litlab_eval_canary"  # a module that must never be imported (see below)
CRAFTED = {
    "no_run": (
        lambda p: [p.pop(k) for k in ("config", "checkpoint", "checkpoint_sha256")],
        "its metadata names no training run (no stored run config, so no data split to "
        + "score it on); export the checkpoint with src/export.py",
    ),
    "foreign_target": (
        _config(lambda c: c["data"].update(_target_=f"{CANARY}.Data")),
        f"its stored config names data._target_={CANARY}.Data, which is outside the packages",
    ),
    "net_of_a_module": (
        _config(lambda c: c["model"]["net"].update(_target_="shutil.copy")),
        "its stored config names model.net._target_=shutil.copy",
    ),
    "kind_is_code": (
        lambda p: p.update(kind=f"{CANARY}.run"),
        f"its litlab metadata is not usable: its task kind is {CANARY}.run; known: ",
    ),
    "kind_of_other_data": (
        lambda p: p.update(kind="regression"),
        "its metadata says task kind regression, but its stored data is image_classification",
    ),
    "config_not_a_mapping": (
        lambda p: p.update(config="[1, 2]"),
        "its litlab metadata is not usable: config is a list, not a mapping of the run",
    ),
    "resolver": (
        _config(lambda c: c["data"].update(batch_size="${oc.env:HOME}")),
        "its stored config has an interpolation or resolver in data.batch_size=${oc.env:HOME}",
    ),
    "inputs_not_the_files": (
        lambda p: p.update(input_names='["image"]'),
        "its litlab metadata is not usable: input_names is ['image'], the model takes ['x']",
    ),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_file_with_crafted_or_missing_metadata_is_one_line(case, digits, tmp_path, monkeypatch):
    """Metadata is data: checked before anything is built or written, and a module it names
    is never imported (the canary module would write a file)."""
    canary = tmp_path / "imported"
    (tmp_path / f"{CANARY}.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    change, expected = CRAFTED[case]
    path = _crafted(digits["onnx"], tmp_path / "model.onnx", change)
    with pytest.raises(UserError) as err:
        litlab.evaluate([f"model_path={path}", f"paths.log_dir={tmp_path / 'logs'}"])
    assert str(err.value).startswith(f"model_path={path}: ")
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert not run_dirs(tmp_path / "logs", "eval")  # nothing written
    assert not canary.exists() and CANARY not in sys.modules


def test_wrong_files_and_both_models_are_one_line(digits_run, digits, tmp_path):
    not_onnx = tmp_path / "notes.onnx"
    not_onnx.write_text("not a model")
    cases = {
        f"model_path={not_onnx}": f"model_path={not_onnx} is not a readable ONNX file",
        f"model_path={digits_run.best}": (
            f"model_path={digits_run.best} is a checkpoint; pass it as ckpt_path="
        ),
        f"model_path={tmp_path / 'gone.onnx'}": f"model_path={tmp_path / 'gone.onnx'}: no such",
    }
    for override, expected in cases.items():
        with pytest.raises(UserError, match="^" + expected.replace(".", r"\.")):
            litlab.evaluate([override, f"paths.log_dir={tmp_path / 'logs'}"])
    with pytest.raises(UserError) as err:
        litlab.evaluate(
            [
                f"model_path={digits['onnx']}",
                f"ckpt_path={digits_run.best}",
                f"paths.log_dir={tmp_path / 'logs'}",
            ]
        )
    assert "are both given; eval.py scores one: a checkpoint (ckpt_path=)" in str(err.value)
    assert not run_dirs(tmp_path / "logs", "eval")


# train overrides of a small run per task kind export applies to (digits: above)
KINDS = {
    "regression": ["experiment=diabetes", "trainer.max_epochs=20"],
    "node_classification": ["model=gnn", "trainer.max_epochs=20"],
    "graph_classification": ["model=gin", "data=mutag", "trainer.max_epochs=5"],
    "volume_segmentation": [*TINY_SEG, "trainer.max_epochs=2"],
    "image_segmentation": [
        "model=unet2d",
        "data=masks",
        "data.num_classes=3",
        "data.image_size=32",
        "data.batch_size=8",
        "trainer.max_epochs=5",
    ],
}


@pytest.mark.slow  # a training, an export and three evals per kind: minutes on 2 cores
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_scores_its_files_as_its_checkpoint(kind, tmp_path, shared_data):
    """fp32: the checkpoint's metrics (within float tolerance) and predictions (3D and 2D
    segmentation: the same mask files too); int8: the same metrics and columns, its own
    figures. Nothing of the train or export run changes."""
    from helpers.masks import mask_folder

    from litlab.export.recipe import export_checkpoint

    logs, extra = tmp_path / "logs", []
    if kind == "graph_classification":
        extra = [f"paths.data_dir={shared_data('TUDataset').parent}"]
    if kind == "image_segmentation":
        extra = [f"data.root={mask_folder(tmp_path / 'masks', count=40)}"]
    train = litlab.train([*KINDS[kind], *extra, f"paths.log_dir={logs}", "seed=3"])
    best, export_dir = train.best_checkpoint, tmp_path / "export"
    data_dir = extra[0].split("=", 1)[1] if kind == "graph_classification" else None
    report = export_checkpoint(
        best, export_dir, data_dir, formats=["onnx", "onnx_int8"], latency={"batch_sizes": []}
    )
    assert report["ok"], report["formats"]
    before = fingerprint(train.run_dir), fingerprint(export_dir)
    here = extra[:1] if kind == "graph_classification" else []
    ckpt, ckpt_rows, ckpt_dir = evaluate(logs, f"ckpt_path={best}", *here)
    fp32, rows, fp32_dir = evaluate(logs, f"model_path={export_dir / 'model.onnx'}", *here)
    assert fp32 == pytest.approx(ckpt, rel=1e-4, abs=1e-5)
    same_predictions(rows, ckpt_rows, atol=1e-3)
    masks = sorted(p.name for p in (ckpt_dir / "masks").glob("*"))
    assert masks or kind != "volume_segmentation"  # 3D eval writes one mask per test volume
    assert sorted(p.name for p in (fp32_dir / "masks").glob("*")) == masks
    int8, rows, _ = evaluate(logs, f"model_path={export_dir / 'model.int8.onnx'}", *here)
    assert set(int8) == set(ckpt) and list(rows.columns) == list(ckpt_rows.columns)
    assert len(rows) == len(ckpt_rows) and int8["test/loss"] != fp32["test/loss"]
    assert (fingerprint(train.run_dir), fingerprint(export_dir)) == before
