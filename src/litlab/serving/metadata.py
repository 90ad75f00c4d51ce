"""An exported file's litlab metadata and ONNX graph are data from elsewhere: both are checked
when the service opens the file, before it listens, and anything wrong is one `UserError` line
(exit 2) saying what is wrong and what is valid. The service then trusts only what was checked:
a number out of range (a std of 1e-300, an OOD array that overflows a distance) or a graph that
differs from what the kind feeds and decodes would fail on every request instead."""

import json
import math
from pathlib import Path

import numpy as np

from litlab import tasks
from litlab.errors import UserError
from litlab.tasks.checks import MAX_INT, SCALE_FLOOR, Bad, check_number, integer, listed, require
from litlab.tasks.tensors import FLOAT

MAX_VALUE_BYTES = 4 << 20  # one metadata value (the run config; the OOD model: ~9 kB)
MAX_CLASSES, MAX_NAME = 100_000, 256


def _finite_everywhere(meta: dict) -> None:
    """Every number anywhere in the metadata is finite and fits in 64 bits (JSON readers and
    the /metadata answer cannot carry NaN, inf or a 400-digit integer). Iterative: a deep
    value costs no recursion."""
    stack = [((key,), value) for key, value in meta.items()]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*where, f".{k}"), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*where, f"[{i}]"), v) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise Bad(f"{''.join(where)[:80]} is {value!r}; every number must be finite")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise Bad(
                f"{''.join(where)[:80]} is an integer of {value.bit_length()} bits; every "
                "integer must fit in 64 bits"
            )


def _output_names(meta: dict, key: str, width) -> None:
    """The names of the output columns (`key`: the kind's, e.g. classes), as
    many as the model's outputs."""
    require(key in meta, f"it lacks {key} (not an export of src/export.py?)")
    names = listed(meta[key], key, max_len=MAX_CLASSES)
    require(len(names) >= 1, f"{key} is empty")
    for c in names:
        require(
            isinstance(c, str) and 0 < len(c) <= MAX_NAME,
            f"a name in {key} is {str(c)[:40]!r}; expected text of 1 to {MAX_NAME} characters",
        )
    require(
        width is None or len(names) == width,
        f"{key} has {len(names)} names but the model outputs {width} {key}",
    )


def check_metadata(meta: dict, input_names: list[str], width) -> dict:
    """Raise `Bad` for the first problem; `width` is the model's static output width (class
    count, targets; None when the file leaves it dynamic). Files written before the key
    `kind` hold it as `task`: read as `kind`."""
    if "kind" not in meta and "task" in meta:
        meta["kind"] = meta.pop("task")
    missing = [k for k in ("kind", "inputs", "input_names") if k not in meta]
    require(not missing, f"it lacks {', '.join(missing)} (not an export of src/export.py?)")
    _finite_everywhere(meta)
    name = meta["kind"]
    known = list(tasks.kinds())  # every kind declared in litlab.tasks, a new one's too
    require(name in known, f"kind is {str(name)[:40]!r}; known kinds: {', '.join(known)}")
    kind = tasks.get(name)
    _output_names(meta, kind.names_key, width)
    require(
        meta["input_names"] == input_names,
        f"input_names is {str(meta['input_names'])[:80]}; the model's inputs are {input_names}",
    )
    inputs = meta["inputs"]
    require(isinstance(inputs, dict) and isinstance(inputs.get("x"), dict), "inputs.x is missing")
    channels = kind.check_inputs(inputs)  # the layout the kind serves
    if "ood" in meta:
        require(kind.confidence, f"it holds ood, but {name} outputs carry no confidence")
        check_ood(meta["ood"], channels)
    return meta


#: what GET /metadata answers, besides the output names (`classes`, `targets`): what a client
#: needs to build a request and read its answer, and which model and versions answered. The run
#: config (every setting, with the training machine's absolute paths) and the checkpoint's path
#: stay in the file, for whoever holds it, and out of the answer to anyone who can reach the port.
CLIENT_KEYS = ("kind", "input_names", "inputs", "metric", "ood", "checkpoint_sha256",
               "litlab_version", "torch_version")  # fmt: skip


def for_clients(meta: dict) -> dict:
    """The checked metadata as GET /metadata answers it (CLIENT_KEYS)."""
    names_key = tasks.get(meta["kind"]).names_key
    keys = (CLIENT_KEYS[0], names_key, *CLIENT_KEYS[1:])
    return {k: meta[k] for k in keys if k in meta}


def load_model(path: Path):
    """The file's ONNX model, without external data (its metadata and weights are read here)."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as err:  # noqa: BLE001 (protobuf raises many types on a bad file)
        raise UserError(f"{path} is not a readable ONNX file ({type(err).__name__})") from None


def read_checked(path: Path, session, model) -> dict:
    """The file's metadata, size-checked before decoding and checked against the session."""
    meta = {}
    try:
        for p in model.metadata_props:
            require(
                len(p.value) <= MAX_VALUE_BYTES,
                f"metadata {p.key[:40]!r} is {len(p.value):,} bytes; at most {MAX_VALUE_BYTES:,}",
            )
            try:
                meta[p.key] = json.loads(p.value)
            except (ValueError, RecursionError):
                meta[p.key] = p.value
        output = session.get_outputs()[0].shape
        width = output[1] if len(output) > 1 and isinstance(output[1], int) else None
        return check_metadata(meta, [i.name for i in session.get_inputs()], width)
    except Bad as err:
        raise UserError(
            f"{path.name}: its litlab metadata is not usable: {err} "
            "(re-export the checkpoint with src/export.py)"
        ) from None


# ---------------------------------------------------------- ood metadata
MAX_OOD_DIMS, MAX_OOD_VALUE = 4096, 1e12


def check_ood(ood, channels: int | None) -> None:
    require(isinstance(ood, dict), "ood is not an object")
    check_number(ood.get("threshold"), "ood.threshold", -1e6, 1e6)
    parts = ood.get("parts")
    known = ("confidence", "input", "statistics")
    require(
        isinstance(parts, dict) and "confidence" in parts and set(parts) <= set(known),
        f"ood.parts must name some of {', '.join(known)}, confidence included",
    )
    for name, part in parts.items():
        require(isinstance(part, dict), f"ood.parts.{name} is not an object")
        check_number(part.get("median"), f"ood.parts.{name}.median", -1e9, 1e9)
        check_number(part.get("scale"), f"ood.parts.{name}.scale", SCALE_FLOOR, 1e9)
    if "test_count" in ood:
        integer(ood["test_count"], "ood.test_count", 1, MAX_INT)
    if "test_exceed_fraction" in ood:
        check_number(ood["test_exceed_fraction"], "ood.test_exceed_fraction", 0, 1)
    model = ood.get("model")
    require(
        (model is not None) == ("input" in parts) and (model is None or channels is not None),
        "ood.model must be present exactly when ood.parts has input (tensor inputs)",
    )
    if model is None:
        return
    require(set(parts) == set(known), f"ood.parts must be {', '.join(known)}")
    pca, stats = model.get("input"), model.get("statistics")
    require(isinstance(pca, dict) and isinstance(stats, dict), "ood.model is incomplete")
    require(
        "components" not in pca,
        "ood.model is in the form of exports before the compact one (components, variances)",
    )
    d = len(_array(pca.get("mean"), "ood.model.input.mean", (None,)))
    _whitening(pca, "ood.model.input", d)
    _array(stats.get("mean"), "ood.model.statistics.mean", (2 * channels,))
    _whitening(stats, "ood.model.statistics", 2 * channels)


def _array(value, what: str, shape: tuple):
    """An array of the OOD model as `litlab.export.ood.pack` stores it, of finite numbers in
    `shape` (None: any length up to MAX_OOD_DIMS)."""
    from litlab.export.ood import unpack

    try:
        array = unpack(value)
    except ValueError as err:
        raise Bad(f"{what} {err}") from None
    want = [MAX_OOD_DIMS if n is None else n for n in shape]
    require(
        array.ndim == len(shape)
        and all(n <= w if s is None else n == w for n, w, s in zip(array.shape, want, shape)),
        f"{what} has shape {list(array.shape)}; expected {[s or f'<= {MAX_OOD_DIMS}' for s in shape]}",
    )
    require(bool(np.isfinite(array).all()), f"{what} has entries that are not finite numbers")
    require(  # a distance squares them: larger would overflow every request's score
        bool((np.abs(array) <= MAX_OOD_VALUE).all()),
        f"{what} has entries larger than {MAX_OOD_VALUE:g} in size; expected a fitted model's",
    )
    return array


def _whitening(part: dict, what: str, n: int) -> None:
    """An upper-triangular n x n whitening (`litlab.export.ood.pack_model`): its diagonal and
    its column scales positive (a distance)."""
    array = _array(part.get("whitening"), f"{what}.whitening", (n * (n + 1) // 2,))
    diagonal = array[np.cumsum([0, *range(n, 1, -1)])] if n else array
    scales = _array(part.get("column_scales"), f"{what}.column_scales", (n,))
    require(
        bool((diagonal > 0).all() and (scales > 0).all()),
        f"{what}.whitening has a diagonal entry or column scale <= 0; expected > 0",
    )


# ------------------------------------------------------------- signature
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
