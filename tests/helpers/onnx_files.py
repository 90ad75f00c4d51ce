"""Crafted ONNX files for the serving tests: a real 10-class model of one MatMul under any
litlab metadata (`GOOD`, a complete `OOD` entry, `deep` to doctor them), input/output dtypes
and ranks, weights and constants, built with onnx.helper (no training)."""

import json

import numpy as np

GOOD = {  # the litlab metadata of an 8x8 grey image classifier with 10 classes
    "kind": "image_classification",
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


def ood_entry(change=None) -> dict:
    """A complete OOD entry of an 8x8 grey classifier as export stores it (the compact packed
    model: 64 summary dims, 2 statistics, fitted on noise), its model `change`d in place."""
    from litlab.export import ood

    train = np.random.default_rng(0).normal(0.3, 0.4, size=(200, 1, 8, 8))
    model = ood.pack_model(
        {
            "input": ood.fit_input(ood.block_means(train)),
            "statistics": ood.fit_statistics(ood.statistics(train)),
        }
    )
    if change:
        change(model)
    parts = {k: {"median": 0.0, "scale": 1.0} for k in ("confidence", "input", "statistics")}
    return {
        "threshold": 1.0,
        "test_count": 360,
        "test_exceed_fraction": 0.05,
        "parts": parts,
        "model": model,
    }


OOD = ood_entry()


def deep(update: dict, base: dict = GOOD) -> dict:
    """A copy of `base` with dotted keys set (`{"inputs.x.normalization.std": [0]}`)."""
    out = json.loads(json.dumps(base))
    for key, value in update.items():
        *parents, last = key.split(".")
        target = out
        for p in parents:
            target = target[p]
        target[last] = value
    return out


def crafted_model(
    path,
    props: dict | None,
    outputs: int = 10,
    weight: np.ndarray | None = None,
    bias: np.ndarray | list | None = None,
    constant_bias: bool = False,
    x_type: str = "FLOAT",
    x_shape: tuple = ("batch", 1, 8, 8),
    out_type: str = "FLOAT",
    out_rank: int = 2,
    batch_mean: bool = False,
    floor: float | None = None,
):
    """x -> (Cast) -> Flatten -> MatMul (+ bias) -> (Cast) -> logits [batch, outputs(, 1...)],
    with `props` as metadata (a str value is stored as is: raw JSON text). `x_type`/`out_type`
    name ONNX element types; `bias` may be a list (one Add each); `constant_bias` stores the
    biases in Constant nodes; `batch_mean` answers one row for the whole batch; `floor` is a
    Max with a constant (-inf: a sentinel, as exported masks hold)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    features = int(np.prod([s for s in x_shape[1:]]))
    if weight is None:
        weight = np.random.default_rng(0).normal(size=(features, outputs)).astype(np.float32)
    inits, nodes, flat = [numpy_helper.from_array(weight, "w")], [], "x"
    if x_type != "FLOAT":
        nodes.append(helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT))
        flat = "xf"
    nodes += [
        helper.make_node("Flatten", [flat], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["z"]),
    ]
    last = "z"
    for i, b in enumerate([] if bias is None else bias if isinstance(bias, list) else [bias]):
        tensor = numpy_helper.from_array(np.asarray(b, np.float32), f"b{i}")
        if constant_bias:
            nodes.append(helper.make_node("Constant", [], [f"b{i}"], value=tensor))
        else:
            inits.append(tensor)
        nodes.append(helper.make_node("Add", [last, f"b{i}"], [f"z{i}"]))
        last = f"z{i}"
    if floor is not None:
        value = numpy_helper.from_array(np.asarray(floor, np.float32), "floor")
        nodes.append(helper.make_node("Constant", [], ["floor"], value=value))
        nodes.append(helper.make_node("Max", [last, "floor"], ["zf"]))
        last = "zf"
    if batch_mean:
        inits.append(numpy_helper.from_array(np.asarray([0], np.int64), "batch_axis"))
        nodes.append(helper.make_node("ReduceMean", [last, "batch_axis"], ["zm"], keepdims=1))
        last = "zm"
    if out_rank != 2:
        axes = numpy_helper.from_array(np.arange(2, out_rank, dtype=np.int64), "axes")
        inits.append(axes)
        nodes.append(helper.make_node("Unsqueeze", [last, "axes"], ["zu"]))
        last = "zu"
    nodes.append(helper.make_node("Cast", [last], ["logits"], to=getattr(TensorProto, out_type)))
    out_shape = ["batch", outputs, *[1] * (out_rank - 2)]
    graph = helper.make_graph(
        nodes,
        "crafted",
        [helper.make_tensor_value_info("x", getattr(TensorProto, x_type), list(x_shape))],
        [helper.make_tensor_value_info("logits", getattr(TensorProto, out_type), out_shape)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    if props is not None:
        helper.set_model_props(
            m, {k: v if isinstance(v, str) else json.dumps(v) for k, v in props.items()}
        )
    onnx.save(m, str(path))
    return path
