"""An ONNX file's litlab metadata is data from elsewhere: the service checks it when it opens
the file, before it listens, and refuses a bad one in one line (exit 2). Files here are
crafted: a real 10-class model (one MatMul) under doctored metadata."""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

from litlab.errors import UserError

GOOD = {
    "task": "image_classification",
    "classes": [str(i) for i in range(10)],
    "input_names": ["x"],
    "inputs": {
        "x": {
            "shape": ["batch", 1, 8, 8],
            "dtype": "float32",
            "layout": "NCHW",
            "normalization": {"mean": [0.3], "std": [0.4]},
        },
        "image_size": 8,
        "channels": 1,
        "background": [0.0],
    },
}


def model(path, props: dict | None, outputs: int = 10):
    """x [batch, 1, 8, 8] -> flatten -> MatMul -> logits [batch, outputs], with `props`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(
        np.random.default_rng(0).normal(size=(64, outputs)).astype(np.float32), "w"
    )
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["x"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], ["logits"]),
        ],
        "crafted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", outputs])],
        [weight],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    if props is not None:
        helper.set_model_props(
            m, {k: v if isinstance(v, str) else json.dumps(v) for k, v in props.items()}
        )
    onnx.save(m, str(path))
    return path


def deep(update: dict) -> dict:
    out = json.loads(json.dumps(GOOD))
    for key, value in update.items():
        node, *parts = key.split(".")
        target = out
        for p in [node, *parts][:-1]:
            target = target[p]
        target[[node, *parts][-1]] = value
    return out


def with_ood(change=None) -> dict:
    """GOOD with an out-of-distribution model as an export stores it, `change`d."""
    from litlab.export import ood

    train = np.random.default_rng(0).normal(0.3, 0.4, size=(200, 1, 8, 8))
    model = ood.pack_model(
        {
            "input": ood.fit_input(ood.summary(train)),
            "statistics": ood.fit_statistics(ood.statistics(train)),
        }
    )
    scale = {"median": 0.0, "scale": 1.0}
    meta = {"threshold": 1.0, "parts": dict.fromkeys(model | {"confidence": 0}, scale)}
    meta["model"] = model
    if change:
        change(model)
    return deep({"ood": meta})


def _old_form(model):
    model["input"] = {"mean": [0.0] * 64, "components": [[1.0] * 64], "variances": [1.0]}


def _wrong_shape(model):
    model["input"]["whitening"]["shape"] = [2079]


def _zero_scale(model):
    from litlab.export import ood

    model["statistics"]["column_scales"] = ood.pack([1.0, 0.0])


CRAFTED = {  # name: (metadata, words of the error)
    "no metadata": (None, "lacks task, classes, inputs, input_names"),
    "3 names for 10 outputs": (deep({"classes": ["a", "b", "c"]}), "3 names but the model"),
    "std 0": (deep({"inputs.x.normalization.std": [0]}), "normalization std is 0"),
    "std NaN": (deep({"inputs.x.normalization.std": "NaN"}), "normalization.std"),
    "huge string": (deep({"classes": ["x" * (5 << 20)] + list("123456789")}), "bytes; at most"),
    "2M class names": (deep({"classes": [str(i) for i in range(2_000_000)]}), "at most"),
    "long class name": (deep({"classes": ["y" * 300] + list("123456789")}), "class name"),
    "unknown task": (deep({"task": "os.system"}), "known tasks"),
    "image_size 100000": (deep({"inputs.image_size": 100000}), "inputs.image_size"),
    "channels 7": (deep({"inputs.channels": 7}), "inputs.channels"),
    "background 2": (deep({"inputs.background": [2.0]}), "background"),
    "wrong input name": (deep({"input_names": ["image"]}), "model's inputs are ['x']"),
    "bad ood": (deep({"ood": {"threshold": 1.0, "parts": {"exec": {}}}}), "ood.parts"),
    "ood model of older exports": (with_ood(_old_form), "before the compact one"),
    "ood whitening of another shape": (with_ood(_wrong_shape), "does not hold 4158 bytes"),
    "ood column scale 0": (with_ood(_zero_scale), "column scale <= 0"),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_metadata_is_refused_in_one_line(name, tmp_path):
    from litlab.serving.runner import Runner

    meta, words = CRAFTED[name]
    path = model(tmp_path / "model.onnx", meta)
    with pytest.raises(UserError) as err:
        Runner(path)
    message = str(err.value)
    assert words in message and "\n" not in message and len(message) < 400, message


def test_outputs_wider_than_a_dynamic_shape_says(tmp_path):
    """The class count is checked on a real run too (an output width the file leaves open)."""
    from litlab.serving.runner import Runner

    path = model(tmp_path / "model.onnx", GOOD, outputs=12)
    with pytest.raises(UserError, match="12"):
        Runner(path)


def test_good_crafted_file_opens(tmp_path):
    from litlab.serving.runner import Runner

    runner = Runner(model(tmp_path / "model.onnx", GOOD))
    assert runner.classes == GOOD["classes"] and runner.ood is None
    runner = Runner(model(tmp_path / "ood.onnx", with_ood()))
    scores = runner.ood_scores(np.full((2, 10), 0.1), np.zeros((2, 1, 8, 8)))
    assert scores.shape == (2,) and np.isfinite(scores).all()


def test_serve_exits_2_before_listening(tmp_path):
    path = model(tmp_path / "model.onnx", deep({"inputs.image_size": 100000}))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "src" / "serve.py"),
            f"model_path={path}",
            f"paths.log_dir={tmp_path / 'logs'}",
            "extras.print_config=false",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "inputs.image_size" in lines[0], lines
    assert "serving" not in proc.stdout


@pytest.mark.parametrize(
    "override,words",
    [("max_header_bytes=10", "max_header_bytes"), ("keep_alive_s=-1", "keep_alive_s")],
)
def test_bad_serve_setting_is_one_line(override, words):
    from omegaconf import OmegaConf

    from litlab.serving.settings import from_config

    with pytest.raises(UserError, match=words):
        from_config(OmegaConf.create(dict([override.split("=")])))
