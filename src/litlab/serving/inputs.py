"""Request bodies -> model inputs, preprocessed as in training; anything wrong is a
`BadRequest` with a status code and one sentence (never an exception that reaches a 500)."""

import functools
import json
import re
import tempfile
from pathlib import Path

import numpy as np


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


#: JSON strings (keys): removed before looking for literals and brackets
STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: +1 for [ and {, -1 for ] and }
NESTING = np.zeros(256, np.int8)
NESTING[[91, 123]], NESTING[[93, 125]] = 1, -1
FLOAT32_MAX = float(np.finfo(np.float32).max)


def depth(stripped: bytes) -> int:
    """Deepest bracket nesting of a JSON text without its strings (vectorized, no parsing)."""
    steps = NESTING[np.frombuffer(stripped, np.uint8)]
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def parse_json(body: bytes, max_depth: int = 8) -> dict:
    """The body as a JSON object whose values hold only numbers, nested at most `max_depth`
    deep: checked on the text before it is parsed (deep nesting never reaches the parser)."""
    if not body.strip():
        raise BadRequest("The request body is empty.")
    stripped = STRING.sub(b'""', body)
    if (d := depth(stripped)) > max_depth:
        raise BadRequest(
            f"The JSON body is nested {d} deep; the limit is {max_depth} "
            "(serve setting max_json_depth).",
            422,
        )
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest('The JSON body must be an object, e.g. {"inputs": [...]}.', 422)
    if any(word in stripped for word in (b"true", b"false", b"null")):  # no number has them
        raise BadRequest("JSON inputs hold only numbers: no true, false or null.", 422)
    return data


def _no_constant(name: str):
    raise BadRequest(f"JSON inputs must be finite numbers, not {name}.", 422)


def array(value, name: str, dtype, ndim: int) -> np.ndarray:
    """A JSON list as a numeric array of `ndim` dims, finite in float32 (integers: exact), or
    a 422 saying what is wrong. Strings, booleans and null are refused, never converted."""
    if not isinstance(value, list):
        raise BadRequest(f"'{name}' must be a JSON array.", 422)
    try:
        out = np.array(value)  # ints -> int64, numbers -> float64; anything else shows in kind
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise BadRequest(f"'{name}' must be a rectangular array of numbers.", 422) from None
    if out.dtype.kind not in "iuf" and not (out.size == 0 and out.dtype.kind == "f"):
        raise BadRequest(
            f"'{name}' must be a rectangular array of numbers (no strings or huge integers).",
            422,
        )
    if out.ndim != ndim:
        raise BadRequest(f"'{name}' must have {ndim} dimensions, not {out.ndim}.", 422)
    if not np.isfinite(out).all():
        raise BadRequest(f"'{name}' holds NaN or infinite values.", 422)
    if out.size and np.abs(out).max() > FLOAT32_MAX:
        raise BadRequest(f"'{name}' holds values outside the float32 range (|x| <= 3.4e38).", 422)
    if np.issubdtype(dtype, np.integer):
        if out.size and np.abs(out).max() > 2**53:
            raise BadRequest(f"'{name}' holds integers too large for a node index.", 422)
        if (out != np.round(out)).any():
            raise BadRequest(f"'{name}' must hold integers.", 422)
    out = out.astype(dtype)
    if out.dtype.kind == "f" and not np.isfinite(out).all():  # what the model is fed
        raise BadRequest(f"'{name}' holds values that are not finite as {out.dtype}.", 422)
    return out


def count(n: int, max_items: int, what: str = "items") -> None:
    if n == 0:
        raise BadRequest(f"The request holds no {what}.", 422)
    if n > max_items:
        raise BadRequest(f"The request holds {n} {what}; the limit is {max_items}.", 413)


def tensor_batch(data: dict, shape: list, max_items: int) -> np.ndarray:
    """{"inputs": [sample, ...]}, each sample in the model's input shape (already normalized)."""
    if "inputs" not in data:
        raise BadRequest("The JSON body needs an 'inputs' key: a list of samples.", 422)
    items = data["inputs"]
    count(len(items) if isinstance(items, list) else 1, max_items)
    x = array(items, "inputs", np.float32, len(shape))
    if list(x.shape[1:]) != [int(s) for s in shape[1:]]:
        raise BadRequest(
            f"Each sample must have shape {list(shape[1:])}, not {list(x.shape[1:])}.", 422
        )
    return x


@functools.lru_cache(maxsize=8)
def affine(mean: tuple, std: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(1 / (255 std), -mean / std) per channel: 8-bit pixels normalized in one pass."""
    m = np.asarray(mean, np.float32).reshape(-1, 1, 1)
    s = np.asarray(std, np.float32).reshape(-1, 1, 1)
    return 1 / (255 * s), -m / s


def nifti_voxels(raw: bytes) -> int:
    """Voxels the NIfTI header claims, read from the first bytes only (a gzip bomb is never
    inflated past its header); 0 when there is no readable header."""
    import gzip
    import io

    import nibabel as nib

    try:
        head = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(540) if raw[:2] == b"\x1f\x8b" else raw
        nifti2 = head[4:7] in (b"n+2", b"ni2")
        if not (nifti2 or head[344:347] in (b"n+1", b"ni1")):
            return 0  # no NIfTI magic: not a NIfTI header
        kind = nib.Nifti2Header if nifti2 else nib.Nifti1Header
        header = kind.from_fileobj(io.BytesIO(head[: kind.sizeof_hdr]), check=False)
        shape = header.get_data_shape()
    except Exception:  # noqa: BLE001 (not NIfTI: the reader below says so)
        return 0
    return int(np.prod(shape, dtype=np.float64))


def nifti(
    raw: bytes, filename: str, channels: int, max_voxels: int = 1 << 25
) -> tuple[np.ndarray, np.ndarray]:
    """A NIfTI upload as (volume (C, D, H, W) z-scored per channel as in training, affine);
    its size is checked from the header before the voxels are read."""
    from litlab.domains.medical3d.nifti import read_nifti
    from litlab.domains.medical3d.volumes import normalize
    from litlab.errors import UserError

    if not raw:
        raise BadRequest("The uploaded NIfTI file is empty.")
    if (voxels := nifti_voxels(raw)) > max_voxels:
        raise BadRequest(
            f"The volume's header claims {voxels:,} voxels; the limit is {max_voxels:,} "
            "(serve setting max_volume_voxels).",
            413,
        )
    suffix = ".nii.gz" if raw[:2] == b"\x1f\x8b" else ".nii"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"upload{suffix}"
        path.write_bytes(raw)
        try:
            volume, affine = read_nifti(path)
        except (UserError, Exception):  # noqa: BLE001 (nibabel raises many types)
            raise BadRequest(
                f"The upload {filename!r} is not a readable NIfTI volume "
                "(truncated or another format).",
                400,
            ) from None
    if volume.shape[0] != channels or min(volume.shape[1:]) < 1:
        raise BadRequest(
            f"The volume has {volume.shape[0]} channel(s); the model takes {channels}.", 422
        )
    if not np.isfinite(volume).all():
        raise BadRequest("The volume holds NaN or infinite values.", 422)
    with np.errstate(all="ignore"):
        volume = normalize(volume)
    if not np.isfinite(volume).all():  # values so large that their z-score overflows
        raise BadRequest("The volume's values are too large to normalize (not finite).", 422)
    return volume, affine


def graph(data: dict, features: int, graph_level: bool, max_nodes: int) -> tuple:
    """{"x": nodes x features, "edge_index": [sources, targets], "batch": graph id per node}."""
    for key in ("x", "edge_index"):
        if key not in data:
            raise BadRequest(
                f"The JSON body needs '{key}' (and 'x', 'edge_index'"
                f"{', optional batch' if graph_level else ''}).",
                422,
            )
    x = array(data["x"], "x", np.float32, 2)
    count(len(x), max_nodes, "nodes")
    if x.shape[1] != features:
        raise BadRequest(f"'x' must have {features} features per node, not {x.shape[1]}.", 422)
    edges = (
        array(data["edge_index"], "edge_index", np.int64, 2)
        if data["edge_index"]
        else np.zeros((2, 0), np.int64)
    )
    if edges.shape[0] != 2:
        raise BadRequest("'edge_index' must have 2 rows (sources, targets).", 422)
    if edges.size and (edges.min() < 0 or edges.max() >= len(x)):
        raise BadRequest(f"'edge_index' refers to nodes outside 0..{len(x) - 1}.", 422)
    if not graph_level:
        return x, edges
    batch = (
        array(data["batch"], "batch", np.int64, 1)
        if "batch" in data
        else np.zeros(len(x), np.int64)
    )
    if len(batch) != len(x) or batch.min() < 0 or (np.diff(batch) < 0).any():
        raise BadRequest("'batch' must give each node's graph id, sorted, from 0.", 422)
    if len(np.unique(batch)) != batch.max() + 1:
        raise BadRequest("'batch' must number the graphs 0, 1, 2, ... without gaps.", 422)
    return x, edges, batch


def fit_volume(volume: np.ndarray, layout: dict) -> np.ndarray:
    """Pad or crop to the classifier's fixed size, as its training data was."""
    from monai.transforms import ResizeWithPadOrCrop

    size = [int(s) for s in layout["x"]["shape"][2:]]
    return np.asarray(ResizeWithPadOrCrop(size)(volume), dtype=np.float32)


def nifti_bytes(mask: np.ndarray, affine: np.ndarray) -> bytes:
    import gzip

    import nibabel as nib

    image = nib.Nifti1Image(mask.astype(np.uint8), affine)
    image.set_data_dtype(np.uint8)
    return gzip.compress(image.to_bytes(), compresslevel=1)
