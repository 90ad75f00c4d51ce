"""An ONNX file's graph is data from elsewhere too: when the service opens it (after its
metadata), the graph must take what the service feeds for its task kind (float32 samples at
the layout's rank and sizes; graphs: float32 node features, int64 edges and graph ids) and
answer a float32 output of the rank its kind decodes (classes, values: 2; a mask:
the input's), and its weights must hold no NaN. A file that differs would fail on every request
(ONNX Runtime's own errors, or NaN in every answer); it is refused in one line, before the
server listens."""

from pathlib import Path

import numpy as np

from litlab.errors import UserError
from litlab.tasks.tensors import FLOAT

#: ONNX Runtime's type names that numpy spells otherwise
NUMPY_NAMES = {"float": "float32", "double": "float64", "float16": "float16"}
#: ONNX element types a weight's finiteness is checked for (FLOAT, FLOAT16, DOUBLE, BFLOAT16)
FLOAT_TYPES = (1, 10, 11, 16)


def _dtype(onnx_type: str) -> str:
    """'tensor(float)' -> 'float32' (numpy's names, as the metadata's dtypes)."""
    inner = onnx_type.removeprefix("tensor(").removesuffix(")")
    return NUMPY_NAMES.get(inner, inner)[:40]


def _refuse(path: Path, what: str) -> None:
    raise UserError(f"{path.name}: {what} (re-export the checkpoint with src/export.py)")


def check_inputs(path: Path, session, kind, layout: dict) -> None:
    found = session.get_inputs()
    expected = kind.expected_inputs(layout)  # what the service feeds, in order
    if len(found) != len(expected):
        _refuse(
            path,
            f"the model takes {len(found)} inputs; a model of task {kind.name} takes "
            f"{len(expected)} ({', '.join(name for name, _, _ in expected)})",
        )
    for arg, (name, kind_type, shape) in zip(found, expected, strict=True):
        if arg.type != kind_type or len(arg.shape) != len(shape):
            _refuse(
                path,
                f"the model's input {arg.name[:40]!r} is {_dtype(arg.type)} of rank "
                f"{len(arg.shape)}; a model of task {kind.name} takes {name} as "
                f"{_dtype(kind_type)} of rank {len(shape)}",
            )
        for axis, (got, want) in enumerate(zip(arg.shape, shape, strict=True)):
            if isinstance(got, int) and isinstance(want, int) and got != want:
                _refuse(
                    path,
                    f"the model's input {arg.name[:40]!r} has size {got} on axis {axis}; its "
                    f"metadata (inputs.{name}.shape) says {want}",
                )


def check_output(path: Path, session, kind, layout: dict) -> None:
    out = session.get_outputs()[0]
    rank, what = kind.output_rank(layout)
    if out.type != FLOAT or len(out.shape) != rank:
        _refuse(
            path,
            f"the model's output {out.name[:40]!r} is {_dtype(out.type)} of rank "
            f"{len(out.shape)}; a model of task {kind.name} answers {what} as float32 of rank "
            f"{rank}",
        )


def check_weights(path: Path, model) -> None:
    """No weight stored in the file (initializers, constants) holds NaN: one NaN makes every
    answer NaN. Infinities are left to the warm-up run (a finite answer on zeros is required):
    exported graphs hold -inf/inf sentinels (masks, clamps: a GCN's degree normalization).
    External data (files over 2 GB) is not read here; the warm-up checks it."""
    from onnx import numpy_helper

    def tensors():
        for graph in [model.graph, *(f for f in getattr(model, "functions", []))]:
            yield from getattr(graph, "initializer", [])
            for node in graph.node:
                yield from (a.t for a in node.attribute if a.HasField("t"))

    for tensor in tensors():
        if tensor.data_type not in FLOAT_TYPES or tensor.data_location == 1:  # 1: EXTERNAL
            continue
        values = numpy_helper.to_array(tensor)
        if np.isnan(values.astype(np.float64, copy=False)).any():
            _refuse(path, f"its weight {tensor.name[:60]!r} holds NaN values")


def check_signature(path: Path, model, session, kind, layout: dict) -> None:
    """One line (UserError) for the first way the graph cannot serve `kind`."""
    check_inputs(path, session, kind, layout)
    check_output(path, session, kind, layout)
    check_weights(path, model)
