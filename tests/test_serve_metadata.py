"""An ONNX file's litlab metadata and graph are data from elsewhere: the service checks them
when it opens the file, before it listens, and refuses a bad one in one line (exit 2): every
number of the metadata (finite, in the range of what it is), the graph's input and output
dtypes and ranks, its weights. Files here are crafted: a real 10-class model (one MatMul)
under doctored metadata, dtypes, ranks or weights. The serve settings' bounds too."""

import numpy as np
import pytest
from helpers.onnx_files import GOOD, OOD, crafted_model, deep, ood_entry
from helpers.runs import command_in_process

from litlab.errors import UserError


def with_ood(change=None) -> dict:
    """GOOD with an out-of-distribution model as an export stores it, `change`d."""
    return {**GOOD, "ood": ood_entry(change)}


def _old_form(model):
    model["input"] = {"mean": [0.0] * 64, "components": [[1.0] * 64], "variances": [1.0]}


def _wrong_shape(model):
    model["input"]["whitening"]["shape"] = [2079]


def _zero_scale(model):
    from litlab.export import ood

    model["statistics"]["column_scales"] = ood.pack([1.0, 0.0])


def _huge_mean(model):
    from litlab.export import ood

    model["statistics"]["mean"] = ood.pack([1e30, 0.0])


def _nan_whitening(model):
    from litlab.export import ood

    values = ood.unpack(model["input"]["whitening"])
    values[3] = float("nan")
    model["input"]["whitening"] = ood.pack(values)


CRAFTED = {  # name: (metadata, words of the error)
    "no metadata": (None, "lacks kind, inputs, input_names"),
    "3 names for 10 outputs": (deep({"classes": ["a", "b", "c"]}), "3 names but the model"),
    "std 0": (deep({"inputs.x.normalization.std": [0]}), "normalization std is 0"),
    "std NaN": (deep({"inputs.x.normalization.std": "NaN"}), "normalization.std"),
    "huge string": (deep({"classes": ["x" * (5 << 20)] + list("123456789")}), "bytes; at most"),
    # built by the test (a callable), not at collection in every worker: 0.4 s
    "2M class names": (lambda: deep({"classes": list(map(str, range(2_000_000)))}), "at most"),
    "long class name": (deep({"classes": ["y" * 300] + list("123456789")}), "a name in classes"),
    "unknown kind": (deep({"kind": "os.system"}), "known kinds"),
    "image_size 100000": (deep({"inputs.image_size": 100000}), "inputs.image_size"),
    "channels 7": (deep({"inputs.channels": 7}), "inputs.channels"),
    "background 2": (deep({"inputs.background": [2.0]}), "background"),
    "wrong input name": (deep({"input_names": ["image"]}), "model's inputs are ['x']"),
    "bad ood": (deep({"ood": {"threshold": 1.0, "parts": {"exec": {}}}}), "ood.parts"),
    "ood model of older exports": (with_ood(_old_form), "before the compact one"),
    "ood whitening of another shape": (with_ood(_wrong_shape), "does not hold 4158 bytes"),
    "ood column scale 0": (with_ood(_zero_scale), "column scale <= 0"),
    "ood mean 1e30": (with_ood(_huge_mean), "larger than 1e+12"),
    "ood whitening NaN": (with_ood(_nan_whitening), "not finite"),
    # numbers: finite everywhere, each in the range of what it is (std, scale, variance floors)
    "std 1e-300": (deep({"inputs.x.normalization.std": [1e-300]}), "normalization std is 1e-300"),
    "std subnormal": (deep({"inputs.x.normalization.std": [5e-324]}), "std is 5e-324"),
    "mean NaN": (deep({"inputs.x.normalization.mean": [float("nan")]}), "mean[0] is nan"),
    "NaN in the run config": (
        {**GOOD, "config": '{"model": {"optimizer": {"lr": NaN}}}'},
        "config.model.optimizer.lr is nan; every number must be finite",
    ),
    "-Infinity in the run config": (
        {**GOOD, "config": '{"trainer": {"limits": [1, -Infinity]}}'},
        "config.trainer.limits[1] is -inf",
    ),
    "1e999 in a note": ({**GOOD, "metric": '{"best": 1e999}'}, "metric.best is inf"),
    "400-digit integer": ({**GOOD, "config": '{"seed": 1' + "0" * 400 + "}"}, "64 bits"),
    "channels true": (deep({"inputs.channels": True}), "inputs.channels"),
    "huge volume samples": (
        deep({"kind": "volume_classification", "inputs.x.shape": ["batch", 64, *[1024] * 3]}),
        "values per sample",
    ),
}
for name, update, words in [
    ("OOD scale subnormal", {"parts.confidence.scale": 5e-324}, "confidence.scale is 5e-324"),
    ("OOD scale 1e-300", {"parts.input.scale": 1e-300}, "ood.parts.input.scale"),
    ("OOD threshold 1e300", {"threshold": 1e300}, "ood.threshold"),
    ("OOD fraction 1.5", {"test_exceed_fraction": 1.5}, "ood.test_exceed_fraction"),
    ("OOD count 0", {"test_count": 0}, "ood.test_count"),
    ("OOD whitening a list", {"model.input.whitening": [[1.0, 0.0], [0.0, 1.0]]}, "packed"),
    ("OOD scales of 3 dtypes", {"model.statistics.column_scales.dtype": "int64"}, "dtype"),
    ("OOD mean in plain JSON", {"model.statistics.mean": [1e300, 0.0]}, "statistics.mean"),
]:
    CRAFTED[name] = ({**GOOD, "ood": deep(update, OOD)}, words)


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_metadata_is_refused_in_one_line(name, tmp_path):
    from litlab.serving.runner import Runner

    meta, words = CRAFTED[name]
    meta = meta() if callable(meta) else meta
    path = crafted_model(tmp_path / "model.onnx", meta)
    with pytest.raises(UserError) as err:
        Runner(path)
    message = str(err.value)
    assert words in message and "\n" not in message and len(message) < 400, message


def test_outputs_wider_than_a_dynamic_shape_says(tmp_path):
    """The class count is checked on a real run too (an output width the file leaves open)."""
    from litlab.serving.runner import Runner

    path = crafted_model(tmp_path / "model.onnx", GOOD, outputs=12)
    with pytest.raises(UserError, match="12"):
        Runner(path)


def test_good_crafted_file_opens(tmp_path):
    from litlab.serving.runner import Runner

    runner = Runner(crafted_model(tmp_path / "model.onnx", GOOD))
    assert runner.names == GOOD["classes"] and runner.ood is None
    runner = Runner(crafted_model(tmp_path / "ood.onnx", with_ood()))
    assert runner.ood_model is not None  # the OOD entry the cases above break, whole
    scores = runner.ood_scores(np.full((2, 10), 0.1), np.zeros((2, 1, 8, 8)))
    assert scores.shape == (2,) and np.isfinite(scores).all()
    # a -inf sentinel (a GCN's export holds one) is not a broken weight
    Runner(crafted_model(tmp_path / "sentinel.onnx", GOOD, floor=-np.inf))


def test_an_export_with_nan_in_its_run_config_is_served(tmp_path):
    """export writes a run config's NaN as text ('nan'): the file it writes is one the
    service opens (and /metadata can answer), not one it must refuse."""
    from litlab.export.onnx import write_metadata
    from litlab.serving.runner import Runner

    path = crafted_model(tmp_path / "model.onnx", GOOD)
    write_metadata(path, {"config": {"model": {"lr": float("nan"), "limits": [float("-inf")]}}})
    runner = Runner(path)
    assert runner.meta["config"] == {"model": {"lr": "nan", "limits": ["-inf"]}}


NAN_WEIGHTS = np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32)
NAN_WEIGHTS[5, 3] = np.nan
GRAPHS = {  # name: (crafted_model arguments, words of the error)
    "int64 input": ({"x_type": "INT64"}, "input 'x' is int64 of rank 4"),
    "int32 input": ({"x_type": "INT32"}, "input 'x' is int32"),
    "float64 input": ({"x_type": "DOUBLE"}, "input 'x' is float64"),
    "rank-3 output": ({"out_rank": 3}, "output 'logits' is float32 of rank 3"),
    "rank-4 output": ({"out_rank": 4}, "of rank 4"),
    "float64 output": ({"out_type": "DOUBLE"}, "output 'logits' is float64"),
    "int64 output": ({"out_type": "INT64"}, "is int64 of rank 2"),
    "16x16 input, 8x8 metadata": ({"x_shape": ("batch", 1, 16, 16)}, "size 16 on axis 2"),
    "rank-3 input": ({"x_shape": ("batch", 8, 8)}, "of rank 3"),
    "NaN weights": ({"weight": NAN_WEIGHTS}, "weight 'w' holds NaN values"),
    "NaN in a Constant": (
        {"bias": np.full(10, np.nan), "constant_bias": True},
        "weight 'b0' holds NaN",
    ),
    # inf is a legitimate sentinel (masks): refused by what it does to the answer on zeros
    "inf weights": ({"weight": np.full((64, 10), np.inf, np.float32)}, "is not finite"),
    "inf in a Constant": ({"bias": np.full(10, np.inf), "constant_bias": True}, "not finite"),
    "overflowing weights": ({"bias": [np.full(10, 3e38)] * 2}, "all-zero input is not finite"),
    "fixed batch of 1": ({"x_shape": (1, 1, 8, 8)}, "fails on inputs of the shape"),
    "one row per batch": ({"batch_mean": True}, "answers 1 row for 2 items"),
}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_crafted_graph_is_refused_in_one_line(name, tmp_path):
    """Dtypes and ranks the service does not feed or read, and weights that make every answer
    NaN: refused when the file is opened, not a traceback or a 500 on every request."""
    from litlab.serving.runner import Runner

    kwargs, words = GRAPHS[name]
    path = crafted_model(tmp_path / "model.onnx", GOOD, **kwargs)
    with pytest.raises(UserError) as err:
        Runner(path)
    message = str(err.value)
    assert words in message and "\n" not in message and len(message) < 400, message


SLOW = pytest.mark.slow  # the same path as the first (Runner's UserError): one start each


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"props": deep({"inputs.image_size": 100000})}, "inputs.image_size"),
        pytest.param({"props": GOOD, "x_type": "INT64"}, "input 'x' is int64", marks=SLOW),
        pytest.param({"props": {**GOOD, "config": '{"lr": NaN}'}}, "config.lr", marks=SLOW),
        pytest.param({"props": GOOD, "weight": NAN_WEIGHTS}, "NaN", marks=SLOW),
    ],
    ids=["metadata", "int64 input", "NaN config", "NaN weights"],
)
def test_serve_exits_2_before_listening(kwargs, words, tmp_path, capfd, monkeypatch):
    """serve.py's command (`cli.run(main)`, argv and all) in this process: the refusal is the
    point (serve.py as a process that listens: tests/test_serve.py; its exit 2 as a process:
    tests/test_refusals.py). A server that would start fails the check instead of listening."""
    from litlab.serving import server

    def listen(self):
        raise AssertionError("the server started")

    monkeypatch.setattr(server.DrainingServer, "run", listen)
    path = crafted_model(tmp_path / "model.onnx", **kwargs)
    code, out, err = command_in_process(
        "serve.py", [f"model_path={path}"], tmp_path / "logs", capfd
    )
    assert code == 2, err[-2000:]
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], lines
    assert "serving" not in out


SETTINGS = [  # overrides as typed on the command line, words of the line
    (["max_header_bytes=10"], "max_header_bytes=10"),
    (["keep_alive_s=-1"], "keep_alive_s=-1"),
    (["threads=100000"], "threads=100000 has the wrong type or value; valid: an integer >= 1"),
    (["workers=100000"], "workers=100000"),
    (["decode_threads=100000"], "decode_threads=100000"),
    (["max_batch=10000000"], "max_batch=10000000"),
    (["keep_alive_s=1e-300"], "keep_alive_s=1e-300"),
    (["request_read_timeout_s=0"], "request_read_timeout_s=0"),
    (["max_request_s=.inf"], "max_request_s=inf"),
    (["drain_timeout_s=.nan"], "drain_timeout_s=nan"),
    (["max_wait_ms=1e308"], "max_wait_ms=1e+308"),
    (["max_connections=10000000"], "max_connections=10000000"),
    (["port=65536"], "port=65536"),
    (["workers=64", "threads=64"], "threads=64 x workers=64 is 4096 ONNX Runtime threads"),
]


@pytest.mark.parametrize("overrides,words", SETTINGS, ids=[" ".join(o) for o, _ in SETTINGS])
def test_bad_serve_setting_is_one_line(overrides, words):
    """Every serve setting has both bounds (threads and processes a documented maximum and at
    most 4 per core of this machine, timeouts from 0.1 s): refused in one line naming it."""
    from omegaconf import OmegaConf

    from litlab.config import validate

    with pytest.raises(UserError) as err:
        validate.check(OmegaConf.from_dotlist([*overrides, "paths.log_dir=logs"]), "serve")
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_batch_that_fails_after_its_run_fails_its_requests_and_batching_goes_on(tmp_path):
    """The micro-batcher's loop survives an error after the session run (preparing outputs,
    OOD scores): the waiting requests get it, later ones are answered; none waits forever."""
    import asyncio

    from litlab.serving.runner import MicroBatcher, Runner

    runner = Runner(crafted_model(tmp_path / "model.onnx", GOOD))
    x = np.zeros((1, 1, 8, 8), np.float32)

    async def scenario():
        batcher = MicroBatcher(runner, 8, 5)
        batcher.start()
        kind, runner.kind = runner.kind, None  # preparing the outputs fails
        with pytest.raises(AttributeError):
            await asyncio.wait_for(batcher(x), 10)
        runner.kind = kind
        probs, _ = await asyncio.wait_for(batcher(x), 10)
        await batcher.stop()
        return probs

    assert asyncio.run(scenario()).shape == (1, 10)
