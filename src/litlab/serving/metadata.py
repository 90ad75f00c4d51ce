"""An exported file's litlab metadata is data from elsewhere: it is checked when the file is
opened, before the server listens, and anything wrong is one `UserError` line (exit 2) saying
what is wrong and what is valid. The service then trusts only what was checked here: task
kind, class names (as many as the model's outputs), input shapes, normalization, image size,
sliding-window settings and the out-of-distribution score's parameters. Which of these a file
must hold is what its task kind's input family needs (`TaskKind.inputs`: image size and
normalization, a volume's shape or sliding windows, sample or node features) and its output
family and `ood_inputs` say.

Every number is checked for what it is, not only for being a number: anywhere in the metadata
(the run config too, which /metadata answers) finite and within 64 bits; a std, a scale or a
variance above a floor (dividing by 1e-300 turns every answer into inf); sizes bounded so that
one sample fits in memory. A file that passes answers finite numbers for finite inputs."""

import json
import math
import sys
from pathlib import Path

from litlab import tasks
from litlab.bounds import MAX_IMAGE_SIDE, MAX_VOLUME_SIDE
from litlab.errors import UserError
from litlab.serving import ood_metadata
from litlab.serving.value_checks import MAX_INT, STD_FLOOR, Bad, integer, number, require

MAX_VALUE_BYTES = 4 << 20  # one metadata value (the run config; the OOD model: ~9 kB)
MAX_CLASSES, MAX_NAME = 100_000, 256
MAX_CHANNELS = 64
MAX_FEATURES = 1_000_000
#: floats in one sample (x channels): the warm-up allocates one (2^26 float32: 256 MiB)
MAX_SAMPLE_VALUES = 1 << 26


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
    require(
        math.prod(shape) <= MAX_SAMPLE_VALUES,
        f"{what} {shape} holds {math.prod(shape):,} values per sample; at most "
        f"{MAX_SAMPLE_VALUES:,}",
    )


def _list(value, what: str, length: int | None = None, max_len: int = 4096) -> list:
    require(isinstance(value, list), f"{what} is not a list")
    n = length if length is not None else len(value)
    require(
        len(value) == n and len(value) <= max_len,
        f"{what} has {len(value)} items; expected {length if length is not None else f'<= {max_len}'}",
    )
    return value


def vision_inputs(inputs: dict) -> int:
    size = integer(inputs.get("image_size"), "inputs.image_size", 1, MAX_IMAGE_SIDE)
    channels = inputs.get("channels")
    require(
        type(channels) is int and channels in (1, 3),
        f"inputs.channels is {str(channels)[:40]!r}; expected 1 or 3",
    )
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", 4)
    require(
        shape[1:] == [channels, size, size],
        f"inputs.x.shape is {shape}; expected ['batch', {channels}, {size}, {size}]",
    )
    norm = inputs["x"].get("normalization")
    require(isinstance(norm, dict), "inputs.x.normalization is missing")
    for v in _list(norm.get("mean"), "inputs.x.normalization.mean", channels):
        number(v, "a normalization mean", -1e3, 1e3)
    for v in _list(norm.get("std"), "inputs.x.normalization.std", channels):
        number(v, "a normalization std", STD_FLOOR, 1e3)
    for v in _list(inputs.get("background", [0.0] * channels), "inputs.background", channels):
        number(v, "a background value", 0, 1)
    fit = inputs.get("fit", "resize")
    require(
        fit in ("resize", "pad"),
        f"inputs.fit is {str(fit)[:40]!r}; expected resize or pad (how an image of another "
        "size is fitted)",
    )
    return channels


def volume_inputs(inputs: dict, windows: bool) -> int:
    """A volume's channels; `windows`: whole volumes are read by sliding windows over patches
    (any size), else the model's fixed size."""
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", 5)
    channels = integer(shape[1], "inputs.x.shape[1] (channels)", 1, MAX_CHANNELS)
    if not windows:
        for s in shape[2:]:
            integer(s, "a volume side in inputs.x.shape", 1, MAX_VOLUME_SIDE)
        _sample_size(shape[1:], "inputs.x.shape")
        return channels
    patch = _list(inputs.get("patch_size"), "inputs.patch_size", 3)
    for s in patch:
        integer(s, "a side of inputs.patch_size", 1, MAX_VOLUME_SIDE)
    _sample_size([channels, *patch], "a patch of channels x inputs.patch_size")
    window = inputs.get("sliding_window")
    require(isinstance(window, dict), "inputs.sliding_window is missing")
    number(window.get("overlap"), "inputs.sliding_window.overlap", 0, 0.95)
    require(
        window.get("mode") in ("constant", "gaussian"),
        f"inputs.sliding_window.mode is {str(window.get('mode'))[:40]!r}; expected constant "
        "or gaussian",
    )
    return channels


def node_inputs(inputs: dict) -> None:
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", 2)
    integer(shape[1], "inputs.x.shape[1] (node features)", 1, MAX_FEATURES)


def sample_inputs(inputs: dict) -> None:
    """JSON samples: a batch axis, then a fixed size per dimension."""
    shape = _list(inputs["x"].get("shape"), "inputs.x.shape", max_len=8)
    require(len(shape) >= 2, f"inputs.x.shape is {shape}; expected ['batch', sizes...]")
    for s in shape[1:]:
        integer(s, "a sample size in inputs.x.shape", 1, MAX_FEATURES)
    _sample_size(shape[1:], "inputs.x.shape")


def _output_names(meta: dict, key: str, width) -> None:
    """The names of the output columns (`key`: the kind's output family's, e.g. classes), as
    many as the model's outputs."""
    require(key in meta, f"it lacks {key} (not an export of src/export.py?)")
    names = _list(meta[key], key, max_len=MAX_CLASSES)
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


def check(meta: dict, input_names: list[str], width) -> dict:
    """Raise `Bad` for the first problem; `width` is the model's static output width (class
    count, targets; None when the file leaves it dynamic)."""
    missing = [k for k in ("task", "inputs", "input_names") if k not in meta]
    require(not missing, f"it lacks {', '.join(missing)} (not an export of src/export.py?)")
    _finite_everywhere(meta)
    task = meta["task"]
    known = list(tasks.kinds())  # every kind declared in litlab.tasks, a new one's too
    require(task in known, f"task is {str(task)[:40]!r}; known tasks: {', '.join(known)}")
    kind, family = tasks.get(task), tasks.get(task).output_family()
    _output_names(meta, family.names_key, width)
    require(
        meta["input_names"] == input_names,
        f"input_names is {str(meta['input_names'])[:80]}; the model's inputs are {input_names}",
    )
    inputs = meta["inputs"]
    require(isinstance(inputs, dict) and isinstance(inputs.get("x"), dict), "inputs.x is missing")
    # the family picks its layout's checks among this module's (vision_inputs, volume_inputs, ...)
    channels = kind.input_family().check_metadata(inputs, sys.modules[__name__])
    if "ood" in meta:
        require(family.confidence, f"it holds ood, but {task} outputs carry no confidence")
        ood_metadata.check(meta["ood"], channels if kind.ood_inputs else None)
    return meta


#: what GET /metadata answers, besides the output names (`classes`, `targets`): what a client
#: needs to build a request and read its answer, and which model and versions answered. The run
#: config (every setting, with the training machine's absolute paths) and the checkpoint's path
#: stay in the file, for whoever holds it, and out of the answer to anyone who can reach the port.
CLIENT_KEYS = ("task", "input_names", "inputs", "metric", "ood", "checkpoint_sha256",
               "litlab_version", "torch_version")  # fmt: skip


def for_clients(meta: dict) -> dict:
    """The checked metadata as GET /metadata answers it (CLIENT_KEYS)."""
    names_key = tasks.get(meta["task"]).output_family().names_key
    keys = (CLIENT_KEYS[0], names_key, *CLIENT_KEYS[1:])
    return {k: meta[k] for k in keys if k in meta}


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
        return check(meta, [i.name for i in session.get_inputs()], width)
    except Bad as err:
        raise UserError(
            f"{path.name}: its litlab metadata is not usable: {err} "
            "(re-export the checkpoint with src/export.py)"
        ) from None
