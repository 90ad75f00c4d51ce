"""Request bodies -> model inputs, preprocessed as in training; anything wrong is a
`BadRequest` with a status code and one sentence (never an exception that reaches a 500)."""

import functools
import io
import json
import tempfile
from pathlib import Path

import numpy as np


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def parse_json(body: bytes) -> dict:
    if not body.strip():
        raise BadRequest("The request body is empty.")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest('The JSON body must be an object, e.g. {"inputs": [...]}.', 422)
    return data


def array(value, name: str, dtype, ndim: int) -> np.ndarray:
    """A JSON list as a numeric array of `ndim` dims, or a 422 saying what is wrong."""
    if not isinstance(value, list):
        raise BadRequest(f"'{name}' must be a JSON array.", 422)
    try:
        out = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError):
        raise BadRequest(f"'{name}' must be a rectangular array of numbers.", 422) from None
    if out.ndim != ndim:
        raise BadRequest(f"'{name}' must have {ndim} dimensions, not {out.ndim}.", 422)
    if not np.isfinite(out).all():
        raise BadRequest(f"'{name}' holds NaN or infinite values.", 422)
    if np.issubdtype(dtype, np.integer) and (out != np.round(out)).any():
        raise BadRequest(f"'{name}' must hold integers.", 422)
    return out.astype(dtype)


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


def image(raw: bytes, layout: dict) -> np.ndarray:
    """A PNG/JPEG as the training pipeline saw it: grey or RGB, the training size, in [0, 1],
    then normalized with the training mean and std. (C, H, W) float32."""
    from PIL import Image, UnidentifiedImageError

    if not raw:
        raise BadRequest("An uploaded file is empty.")
    mode, size = ("L" if layout["channels"] == 1 else "RGB"), int(layout["image_size"])
    try:
        img = Image.open(io.BytesIO(raw), formats=("PNG", "JPEG"))  # no other decoder tried
        if img.mode != mode:
            img = img.convert(mode)
        if img.size != (size, size):
            img = img.resize((size, size), Image.Resampling.BILINEAR)
        pixels = np.asarray(img, dtype=np.float32)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise BadRequest("An uploaded file is not a readable PNG or JPEG image.", 415) from None
    pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    norm = layout["x"]["normalization"]
    scale, shift = _affine(tuple(norm["mean"]), tuple(norm["std"]))
    return pixels * scale + shift  # (pixels / 255 - mean) / std in one pass


@functools.lru_cache(maxsize=8)
def _affine(mean: tuple, std: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(1 / (255 std), -mean / std) per channel: computed once per model."""
    m = np.asarray(mean, np.float32).reshape(-1, 1, 1)
    s = np.asarray(std, np.float32).reshape(-1, 1, 1)
    return 1 / (255 * s), -m / s


def nifti(raw: bytes, filename: str, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """A NIfTI upload as (volume (C, D, H, W) z-scored per channel as in training, affine)."""
    from litlab.data.volumes import normalize, read_nifti
    from litlab.errors import UserError

    if not raw:
        raise BadRequest("The uploaded NIfTI file is empty.")
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
    return normalize(volume), affine


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
