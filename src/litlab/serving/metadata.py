"""An exported file's litlab metadata is data from elsewhere: it is checked when the file is
opened, before the server listens, and anything wrong is one `UserError` line (exit 2) saying
what is wrong and what is valid. The service then trusts only what was checked here: task
kind, class names (as many as the model's outputs), input shapes, normalization, image size,
sliding-window settings and the out-of-distribution score's parameters. Which of these a file
must hold is what its task kind's serving needs (`TaskKind.serve_files`, `serve_output`,
`inputs`, `ood_inputs`).

Every number is checked for what it is, not only for being a number: anywhere in the metadata
(the run config too, which /metadata answers) finite and within 64 bits; a std, a scale or a
variance above a floor (dividing by 1e-300 turns every answer into inf); sizes bounded so that
one sample fits in memory. A file that passes answers finite numbers for finite inputs."""

import json
import math
from pathlib import Path

from litlab import tasks
from litlab.errors import UserError

MAX_VALUE_BYTES = 4 << 20  # one metadata value (the run config; the OOD model: ~9 kB)
MAX_CLASSES, MAX_NAME = 100_000, 256
MAX_IMAGE_SIDE, MAX_VOLUME_SIDE, MAX_CHANNELS = 4096, 1024, 64
MAX_FEATURES, MAX_OOD_DIMS, MAX_OOD_VALUE = 1_000_000, 4096, 1e12
#: floats in one sample (x channels): the warm-up allocates one (2^26 float32: 256 MiB)
MAX_SAMPLE_VALUES = 1 << 26
MAX_INT = 2**63 - 1
#: what a division may divide by: normalization stds and OOD scales
STD_FLOOR, SCALE_FLOOR = 1e-6, 1e-9


class Bad(Exception):
    """One metadata problem: becomes the UserError naming the file."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise Bad(message)


def _number(value, what: str, lo=-math.inf, hi=math.inf, low_open=False) -> float:
    _require(
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
        f"{what} is {value!r}; expected a finite number",
    )
    _require(
        (value > lo if low_open else value >= lo) and value <= hi,
        f"{what} is {value!r}; expected a number in {'(' if low_open else '['}{lo}, {hi}]",
    )
    return value


def _int(value, what: str, lo: int, hi: int) -> int:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi,
        f"{what} is {str(value)[:40]!r}; expected an integer in [{lo}, {hi}]",
    )
    return value


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


def _sample_size(shape: list, what: str) -> None:
    """One sample of `shape` (ints) fits in memory: the warm-up and each request make one."""
    _require(
        math.prod(shape) <= MAX_SAMPLE_VALUES,
        f"{what} {shape} holds {math.prod(shape):,} values per sample; at most "
        f"{MAX_SAMPLE_VALUES:,}",
    )


def _list(value, what: str, length: int | None = None, max_len: int = 4096) -> list:
    _require(isinstance(value, list), f"{what} is not a list")
    n = length if length is not None else len(value)
    _require(
        len(value) == n and len(value) <= max_len,
        f"{what} has {len(value)} items; expected {length if length is not None else f'<= {max_len}'}",
    )
    return value


def _vision(inputs: dict) -> int:
    size = _int(inputs.get("image_size"), "inputs.image_size", 1, MAX_IMAGE_SIDE)
    channels = inputs.get("channels")
    _require(
        type(channels) is int and channels in (1, 3),
        f"inputs.channels is {str(channels)[:40]!r}; expected 1 or 3",
    )
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", 4)
    _require(
        shape[1:] == [channels, size, size],
        f"inputs.x.shape is {shape}; expected ['batch', {channels}, {size}, {size}]",
    )
    norm = inputs["x"].get("normalization")
    _require(isinstance(norm, dict), "inputs.x.normalization is missing")
    for v in _list(norm.get("mean"), "inputs.x.normalization.mean", channels):
        _number(v, "a normalization mean", -1e3, 1e3)
    for v in _list(norm.get("std"), "inputs.x.normalization.std", channels):
        _number(v, "a normalization std", STD_FLOOR, 1e3)
    for v in _list(inputs.get("background", [0.0] * channels), "inputs.background", channels):
        _number(v, "a background value", 0, 1)
    return channels


def _volume(inputs: dict, windows: bool) -> int:
    """A volume's channels; `windows`: whole volumes are read by sliding windows over patches
    (any size), else the model's fixed size."""
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", 5)
    channels = _int(shape[1], "inputs.x.shape[1] (channels)", 1, MAX_CHANNELS)
    if not windows:
        for s in shape[2:]:
            _int(s, "a volume side in inputs.x.shape", 1, MAX_VOLUME_SIDE)
        _sample_size(shape[1:], "inputs.x.shape")
        return channels
    patch = _list(inputs.get("patch_size"), "inputs.patch_size", 3)
    for s in patch:
        _int(s, "a side of inputs.patch_size", 1, MAX_VOLUME_SIDE)
    _sample_size([channels, *patch], "a patch of channels x inputs.patch_size")
    window = inputs.get("sliding_window")
    _require(isinstance(window, dict), "inputs.sliding_window is missing")
    _number(window.get("overlap"), "inputs.sliding_window.overlap", 0, 0.95)
    _require(
        window.get("mode") in ("constant", "gaussian"),
        f"inputs.sliding_window.mode is {str(window.get('mode'))[:40]!r}; expected constant "
        "or gaussian",
    )
    return channels


def _nodes(inputs: dict) -> None:
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", 2)
    _int(shape[1], "inputs.x.shape[1] (node features)", 1, MAX_FEATURES)


def _samples(inputs: dict) -> None:
    """JSON samples: a batch axis, then a fixed size per dimension."""
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", max_len=8)
    _require(len(shape) >= 2, f"inputs.x.shape is {shape}; expected ['batch', sizes...]")
    for s in shape[1:]:
        _int(s, "a sample size in inputs.x.shape", 1, MAX_FEATURES)
    _sample_size(shape[1:], "inputs.x.shape")


def _ood(ood, channels: int | None) -> None:
    _require(isinstance(ood, dict), "ood is not an object")
    _number(ood.get("threshold"), "ood.threshold", -1e6, 1e6)
    parts = ood.get("parts")
    known = ("confidence", "input", "statistics")
    _require(
        isinstance(parts, dict) and "confidence" in parts and set(parts) <= set(known),
        f"ood.parts must name some of {', '.join(known)}, confidence included",
    )
    for name, part in parts.items():
        _require(isinstance(part, dict), f"ood.parts.{name} is not an object")
        _number(part.get("median"), f"ood.parts.{name}.median", -1e9, 1e9)
        _number(part.get("scale"), f"ood.parts.{name}.scale", SCALE_FLOOR, 1e9)
    if "test_count" in ood:
        _int(ood["test_count"], "ood.test_count", 1, MAX_INT)
    if "test_exceed_fraction" in ood:
        _number(ood["test_exceed_fraction"], "ood.test_exceed_fraction", 0, 1)
    model = ood.get("model")
    _require(
        (model is not None) == ("input" in parts) and (model is None or channels is not None),
        "ood.model must be present exactly when ood.parts has input (tensor inputs)",
    )
    if model is None:
        return
    _require(set(parts) == set(known), f"ood.parts must be {', '.join(known)}")
    pca, stats = model.get("input"), model.get("statistics")
    _require(isinstance(pca, dict) and isinstance(stats, dict), "ood.model is incomplete")
    _require(
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
    import numpy as np

    from litlab.export.ood import unpack

    try:
        array = unpack(value)
    except ValueError as err:
        raise Bad(f"{what} {err}") from None
    want = [MAX_OOD_DIMS if n is None else n for n in shape]
    _require(
        array.ndim == len(shape)
        and all(n <= w if s is None else n == w for n, w, s in zip(array.shape, want, shape)),
        f"{what} has shape {list(array.shape)}; expected {[s or f'<= {MAX_OOD_DIMS}' for s in shape]}",
    )
    _require(bool(np.isfinite(array).all()), f"{what} has entries that are not finite numbers")
    _require(  # a distance squares them: larger would overflow every request's score
        bool((np.abs(array) <= MAX_OOD_VALUE).all()),
        f"{what} has entries larger than {MAX_OOD_VALUE:g} in size; expected a fitted model's",
    )
    return array


def _whitening(part: dict, what: str, n: int) -> None:
    """An upper-triangular n x n whitening (`litlab.export.ood.pack_model`): its diagonal and
    its column scales positive (a distance)."""
    import numpy as np

    array = _array(part.get("whitening"), f"{what}.whitening", (n * (n + 1) // 2,))
    diagonal = array[np.cumsum([0, *range(n, 1, -1)])] if n else array
    scales = _array(part.get("column_scales"), f"{what}.column_scales", (n,))
    _require(
        bool((diagonal > 0).all() and (scales > 0).all()),
        f"{what}.whitening has a diagonal entry or column scale <= 0; expected > 0",
    )


def check(meta: dict, input_names: list[str], width) -> dict:
    """Raise `Bad` for the first problem; `width` is the model's static output width (class
    count; None when the file leaves it dynamic)."""
    missing = [k for k in ("task", "classes", "inputs", "input_names") if k not in meta]
    _require(not missing, f"it lacks {', '.join(missing)} (not an export of src/export.py?)")
    _finite_everywhere(meta)
    task = meta["task"]
    known = list(tasks.kinds())  # every kind declared in litlab.tasks, a new one's too
    _require(task in known, f"task is {str(task)[:40]!r}; known tasks: {', '.join(known)}")
    classes = _list(meta["classes"], "classes", max_len=MAX_CLASSES)
    _require(len(classes) >= 1, "classes is empty")
    for c in classes:
        _require(
            isinstance(c, str) and 0 < len(c) <= MAX_NAME,
            f"a class name is {str(c)[:40]!r}; expected text of 1 to {MAX_NAME} characters",
        )
    _require(
        width is None or len(classes) == width,
        f"classes has {len(classes)} names but the model outputs {width} classes",
    )
    _require(
        meta["input_names"] == input_names,
        f"input_names is {str(meta['input_names'])[:80]}; the model's inputs are {input_names}",
    )
    inputs = meta["inputs"]
    _require(isinstance(inputs, dict) and isinstance(inputs.get("x"), dict), "inputs.x is missing")
    kind, channels = tasks.get(task), None
    if kind.serve_files == "image":
        channels = _vision(inputs)
    elif kind.serve_files == "volume":
        channels = _volume(inputs, windows=kind.serve_output == "mask")
    elif kind.inputs == "graph":
        _nodes(inputs)
    else:
        _samples(inputs)
    if "ood" in meta:
        _ood(meta["ood"], channels if kind.ood_inputs else None)
    return meta


def load(path: Path):
    """The file's ONNX model, without external data (its metadata and weights are read here)."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as err:  # noqa: BLE001 (protobuf raises many types on a bad file)
        raise UserError(f"{path} is not a readable ONNX file ({type(err).__name__})") from None


def read(path: Path, session, model=None) -> dict:
    """The file's metadata, size-checked before decoding and checked against the session."""
    model = load(path) if model is None else model
    meta = {}
    try:
        for p in model.metadata_props:
            _require(
                len(p.value) <= MAX_VALUE_BYTES,
                f"metadata {p.key[:40]!r} is {len(p.value):,} bytes; at most {MAX_VALUE_BYTES:,}",
            )
            try:
                meta[p.key] = json.loads(p.value)
            except (ValueError, RecursionError):
                meta[p.key] = p.value
        output = session.get_outputs()[0].shape
        width = output[1] if len(output) > 1 and isinstance(output[1], int) else None
        return check(meta, [i.name for i in session.get_inputs()], width)
    except Bad as err:
        raise UserError(
            f"{path.name}: its litlab metadata is not usable: {err} "
            "(re-export the checkpoint with src/export.py)"
        ) from None
