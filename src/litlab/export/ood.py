"""An out-of-distribution score that travels with an export: a classifier always answers, so
the service also says how far each input is from the training data.

Three parts, each standardized on the test split, combined by their maximum: `input` (tensor
inputs as block means on a coarse grid, scored by a probabilistic PCA of the training split),
`statistics` (each channel's mean and spread: a blank image has no spread at all; noise the
wrong mean and spread) and `confidence` (1 - the largest softmax probability). The threshold is
the 95th percentile of the combined score on the test split. Scales and threshold are measured
with the model as stored (packed: `pack_model`), so the service's flags are the export's. Pure
numpy: the service computes the same numbers on what it feeds the model."""

import base64
import math
import zlib

import numpy as np

QUANTILE = 0.95
PART_QUANTILE = 0.975
MAX_COMPONENTS = 48
#: how the whitening matrices R are stored: their upper triangles as integers in
#: [-LEVELS, LEVELS] times a scale per column, zlib-compressed, in base64. On the digits CNN's
#: test split 12 bits move a score by at most 4e-4 and change no flag, in 5.4 kB for the model
#: (70.5 kB as JSON decimals); the alternatives measured (float16, int8 components, fewer
#: components): BENCHMARKS.md, "Export and serving".
LEVELS = 2047
DTYPES = {"int16": "<i2", "float32": "<f4"}
MAX_ARRAY_BYTES = 32 << 20  # a 4096 x 4096 triangle in int16 is 16 MB


def block_means(x: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) model inputs -> (N, d) block means over a coarse grid."""
    n, _, *spatial = x.shape
    grid = 8 if len(spatial) == 2 else 4
    if max(spatial) <= grid:  # already coarse (digits: 8x8)
        return x.reshape(n, -1)
    out = np.asarray(x, np.float64)
    for axis, size in enumerate(spatial, start=2):
        edges = np.linspace(0, size, min(grid, size) + 1).astype(int)
        widths = np.diff(edges).reshape([-1 if a == axis else 1 for a in range(out.ndim)])
        out = np.add.reduceat(out, edges[:-1], axis=axis) / widths
    return out.reshape(n, -1)


def whitening(form: np.ndarray) -> np.ndarray:
    """Upper-triangular R with R^T R = `form` (positive definite): the quadratic form as a
    factor, which keeps its precision in 12-bit integers (errors relative to R, not to a difference
    of large terms as in the PPCA's residual)."""
    return np.linalg.cholesky(form).T


def fit_input(summaries: np.ndarray) -> dict:
    """Probabilistic PCA of the training summaries (N, d): top components, their variances,
    the mean variance of the rest; kept as the mean and the whitening of its per-dimension
    squared distance (about 1 for training data)."""
    mean = summaries.mean(0)
    centred = summaries - mean
    _, sing, vt = np.linalg.svd(centred, full_matrices=False)
    var = sing**2 / max(len(summaries) - 1, 1)
    d = summaries.shape[1]
    k = min(MAX_COMPONENTS, d - 1, len(var)) if d > 1 else 1
    floor = max(float(var.max()) * 1e-6, 1e-8)
    rest = max(float(var[k:].sum() / max(d - k, 1)) if d > k else floor, floor)
    w, inverse = vt[:k], 1 / np.maximum(var[:k], floor)
    form = (w.T * (inverse - 1 / rest)) @ w + np.eye(d) / rest
    return {"mean": mean, "whitening": whitening(form / d)}


def mahalanobis(x: np.ndarray, params: dict) -> np.ndarray:
    """||R (x - mean)||^2 per row."""
    centred = x - np.asarray(params["mean"])
    return ((centred @ np.asarray(params["whitening"]).T) ** 2).sum(1)


def statistics(x: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) -> (N, 2C): per channel mean and standard deviation."""
    flat = x.reshape(len(x), x.shape[1], -1)
    mean = flat.mean(2)
    spread = np.sqrt(np.maximum((flat * flat).mean(2) - mean * mean, 0))
    return np.concatenate([mean, spread], 1)


def fit_statistics(stats: np.ndarray) -> dict:
    cov = np.atleast_2d(np.cov(stats.T)) + np.eye(stats.shape[1]) * 1e-6
    return {"mean": stats.mean(0), "whitening": whitening(np.linalg.inv(cov))}


def pack(values, dtype: str = "float32") -> dict:
    """An array as metadata: {"dtype", "shape", "base64"}, the base64 of its zlib-compressed
    little-endian values."""
    array = np.ascontiguousarray(values, DTYPES[dtype])
    data = base64.b64encode(zlib.compress(array.tobytes(), 9)).decode("ascii")
    return {"dtype": dtype, "shape": list(array.shape), "base64": data}


def unpack(value) -> np.ndarray:
    """`pack`'s array as float64; ValueError saying what is wrong with anything else (the
    value is data from a file: the decompressed size is bounded by its shape)."""
    if not (isinstance(value, dict) and set(value) == {"dtype", "shape", "base64"}):
        raise ValueError("is not a packed array (dtype, shape, base64)")
    dtype, shape = value["dtype"], value["shape"]
    if dtype not in DTYPES:
        raise ValueError(f"has dtype {str(dtype)[:20]!r}; expected one of {', '.join(DTYPES)}")
    if not (isinstance(shape, list) and all(type(n) is int and 0 <= n < 1 << 20 for n in shape)):
        raise ValueError(f"has shape {str(shape)[:40]}; expected a list of sizes")
    kind = np.dtype(DTYPES[dtype])
    need = math.prod(shape) * kind.itemsize
    if need > MAX_ARRAY_BYTES:
        raise ValueError(f"declares {need:,} bytes (shape {shape}); at most {MAX_ARRAY_BYTES:,}")
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(str(value["base64"]), validate=True), need + 1)
    except (ValueError, zlib.error):
        raise ValueError("has base64 that does not decode to zlib-compressed bytes") from None
    if len(raw) != need or not inflate.eof:
        raise ValueError(f"does not hold {need} bytes (shape {shape} of {dtype})")
    return np.frombuffer(raw, kind).reshape(shape).astype(np.float64)


def pack_model(params: dict) -> dict:
    """The fitted model as stored: per part its mean and its whitening R as `LEVELS` integers
    (upper triangle) times a scale per column."""
    stored = {}
    for part, fields in params.items():
        r = np.asarray(fields["whitening"], np.float64)
        scales = np.abs(r).max(0) / LEVELS
        scales[scales == 0] = 1.0
        stored[part] = {
            "mean": pack(fields["mean"]),
            "whitening": pack(np.round(r / scales)[np.triu_indices(len(r))], "int16"),
            "column_scales": pack(scales),
        }
    return stored


def square(values: np.ndarray) -> np.ndarray:
    """The square matrix of an upper triangle's values (ValueError when the length is no
    triangle's)."""
    n = round((math.sqrt(8 * len(values) + 1) - 1) / 2)
    if n * (n + 1) // 2 != len(values):
        raise ValueError(f"has {len(values)} values; an upper triangle has n(n+1)/2")
    out = np.zeros((n, n))
    out[np.triu_indices(n)] = values
    return out


def unpack_model(model: dict) -> dict:
    """A stored model as float64 arrays: {part: {"mean": (d,), "whitening": (d, d)}}."""
    return {
        part: {
            "mean": unpack(f["mean"]),
            "whitening": square(unpack(f["whitening"])) * unpack(f["column_scales"]),
        }
        for part, f in model.items()
    }


def tensor_parts(x: np.ndarray, params: dict) -> dict[str, np.ndarray]:
    """The input parts of the score for a batch of model inputs."""
    return {
        "input": mahalanobis(block_means(x), params["input"]),
        "statistics": mahalanobis(statistics(x), params["statistics"]),
    }


def unconfidence(probs: np.ndarray) -> np.ndarray:
    """1 - max softmax probability, per item (probs (N, classes, ...): voxels are averaged)."""
    top = 1 - probs.max(1)
    return top if top.ndim == 1 else top.reshape(len(top), -1).mean(1)


def _scale(values: np.ndarray) -> dict:
    median = float(np.median(values))
    high = float(np.quantile(values, PART_QUANTILE))
    return {"median": median, "scale": max(high - median, 1e-6)}


def combined(parts: dict[str, np.ndarray], ood: dict) -> np.ndarray:
    """The max over parts of (value - test median) / (test 97.5th percentile - median)."""
    out = None
    for k, v in parts.items():
        part = ood["parts"][k]
        z = (v - part["median"]) / part["scale"]
        out = z if out is None else np.maximum(out, z)
    return out


def calibrate(test_parts: dict[str, np.ndarray], input_params: dict | None) -> dict:
    """The metadata entry: parts' scales from the test split, the threshold, and how many
    test inputs exceed it."""
    ood = {"parts": {k: _scale(v) for k, v in test_parts.items()}}
    score = combined(test_parts, ood)
    threshold = float(np.quantile(score, QUANTILE, method="higher"))
    ood |= {
        "threshold": threshold,
        "test_count": len(score),
        "test_exceed_fraction": float((score > threshold).mean()),
        "method": "max of standardized parts: " + ", ".join(test_parts),
    }
    if input_params is not None:
        ood["model"] = input_params
    return ood


def measure(spec, predict, train: list) -> dict:
    """The `ood` metadata of an export: the input model fitted on `train` (the training inputs
    the kind measures: whole images or volumes, not segmentation's patches nor graphs, whose
    score is the confidence alone), scales and threshold on the test split, through `predict`
    (the eager net)."""
    import torch

    stored = params = None
    if train:
        stored = pack_model(
            {
                "input": fit_input(np.concatenate([block_means(x) for x in train])),
                "statistics": fit_statistics(np.concatenate([statistics(x) for x in train])),
            }
        )
        params = unpack_model(stored)  # scales and threshold of the model as the service reads it
    probs_of = spec.probs or spec.score
    parts: dict[str, list] = {"confidence": []}
    for inputs, _ in spec.test_batches():
        with torch.inference_mode():
            probs = probs_of(predict, inputs).float().numpy()
        parts["confidence"].append(unconfidence(probs))
        for k, v in (tensor_parts(inputs[0].numpy(), params) if params else {}).items():
            parts.setdefault(k, []).append(v)
    return calibrate({k: np.concatenate(v) for k, v in parts.items()}, stored)


def background(spec) -> list[float]:
    """Per channel, the median border pixel of the training images in [0, 1] (digits: black):
    what transparent pixels of an uploaded image are composited onto."""
    norm = spec.layout["x"]["normalization"]
    mean = np.asarray(norm["mean"]).reshape(1, -1, 1, 1)
    std = np.asarray(norm["std"]).reshape(1, -1, 1, 1)
    borders = []
    for (x,) in spec.calibration(100_000):
        raw = x.numpy() * std + mean
        ring = np.concatenate(
            [raw[:, :, 0], raw[:, :, -1], raw[:, :, :, 0], raw[:, :, :, -1]], axis=2
        )
        borders.append(ring.transpose(1, 0, 2).reshape(raw.shape[1], -1))
    return np.clip(np.median(np.concatenate(borders, 1), 1), 0, 1).round(4).tolist()


def scorer(ood: dict):
    """`combined` of all parts as one function of (probs, x) for the service: the parameters
    as arrays once (stored: packed; just fitted: arrays); the same numbers as the part
    functions above."""
    parts = {k: (float(v["median"]), float(v["scale"])) for k, v in ood["parts"].items()}
    conf = parts["confidence"]
    model = ood.get("model")
    if model is None:
        return lambda probs, x=None: (unconfidence(probs) - conf[0]) / conf[1]
    first = next(iter(model["input"].values()))
    arrays = unpack_model(model) if isinstance(first, dict) else model
    (i0, i1), (s0, s1) = parts["input"], parts["statistics"]

    def score(probs: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
        out = (unconfidence(probs) - conf[0]) / conf[1]
        if x is None:
            return out
        out = np.maximum(out, (mahalanobis(block_means(x), arrays["input"]) - i0) / i1)
        return np.maximum(out, (mahalanobis(statistics(x), arrays["statistics"]) - s0) / s1)

    return score
