"""An out-of-distribution score that travels with an export: a classifier always answers, so
the service also says how far each input is from the training data.

Three parts, each standardized so that 0 is the test split's median and 1 its 97.5th
percentile, combined by their maximum:
- `input`: tensor inputs (images, volumes) summarized as block means on a coarse grid (8x8 per
  channel for images, 4x4x4 for volumes), scored by a probabilistic PCA fitted on the training
  split (squared Mahalanobis distance in the top components plus the residual energy, per
  dimension);
- `statistics`: each channel's mean and standard deviation over the input, their squared
  Mahalanobis distance to the training inputs' (a blank image has no spread at all; noise the
  wrong mean and spread);
- `confidence`: 1 - the largest softmax probability (every classifier; segmentation: averaged
  over the voxels of the volume).
The threshold is the 95th percentile of the combined score on the test split (the "higher"
quantile, so at most 5% of test inputs exceed it); the fraction that does is stored too.
Pure numpy: the service computes the same numbers on what it feeds the model.
"""

import numpy as np

QUANTILE = 0.95
PART_QUANTILE = 0.975
MAX_COMPONENTS = 48


def summary(x: np.ndarray) -> np.ndarray:
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


def fit_input(summaries: np.ndarray) -> dict:
    """Probabilistic PCA of the training summaries (N, d): mean, top components, their
    variances and the mean variance of the rest."""
    mean = summaries.mean(0)
    centred = summaries - mean
    _, sing, vt = np.linalg.svd(centred, full_matrices=False)
    var = sing**2 / max(len(summaries) - 1, 1)
    d = summaries.shape[1]
    k = min(MAX_COMPONENTS, d - 1, len(var)) if d > 1 else 1
    floor = max(float(var.max()) * 1e-6, 1e-8)
    rest = float(var[k:].sum() / max(d - k, 1)) if d > k else floor
    return {
        "mean": mean.tolist(),
        "components": vt[:k].tolist(),
        "variances": np.maximum(var[:k], floor).tolist(),
        "residual_variance": max(rest, floor),
    }


def input_distance(summaries: np.ndarray, params: dict) -> np.ndarray:
    """Per-dimension squared PPCA distance of each summary (about 1 for training data)."""
    centred = summaries - np.asarray(params["mean"])
    z = centred @ np.asarray(params["components"]).T
    inside = (z**2 / np.asarray(params["variances"])).sum(1)
    residual = np.maximum((centred**2).sum(1) - (z**2).sum(1), 0)
    return (inside + residual / params["residual_variance"]) / centred.shape[1]


def statistics(x: np.ndarray) -> np.ndarray:
    """(N, C, *spatial) -> (N, 2C): per channel mean and standard deviation."""
    flat = x.reshape(len(x), x.shape[1], -1)
    mean = flat.mean(2)
    spread = np.sqrt(np.maximum((flat * flat).mean(2) - mean * mean, 0))
    return np.concatenate([mean, spread], 1)


def fit_statistics(stats: np.ndarray) -> dict:
    cov = np.atleast_2d(np.cov(stats.T)) + np.eye(stats.shape[1]) * 1e-6
    return {"mean": stats.mean(0).tolist(), "precision": np.linalg.inv(cov).tolist()}


def statistics_distance(stats: np.ndarray, params: dict) -> np.ndarray:
    z = stats - np.asarray(params["mean"])
    return np.einsum("ni,ij,nj->n", z, np.asarray(params["precision"]), z)


def tensor_parts(x: np.ndarray, params: dict) -> dict[str, np.ndarray]:
    """The input parts of the score for a batch of model inputs."""
    return {
        "input": input_distance(summary(x), params["input"]),
        "statistics": statistics_distance(statistics(x), params["statistics"]),
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


def measure(spec, predict) -> dict:
    """The `ood` metadata of an export: the input model fitted on the training split (for the
    kinds that declare `ood_inputs`: whole images or volumes, not segmentation's patches nor
    graphs), scales and threshold on the test split, through `predict` (the eager net)."""
    import torch

    from litlab import tasks

    params = None
    if tasks.get(spec.task).ood_inputs:
        train = [b[0].numpy() for b in spec.calibration(100_000)]
        params = {
            "input": fit_input(np.concatenate([summary(x) for x in train])),
            "statistics": fit_statistics(np.concatenate([statistics(x) for x in train])),
        }
    probs_of = spec.probs or spec.score
    parts: dict[str, list] = {"confidence": []}
    for inputs, _ in spec.test_batches():
        with torch.inference_mode():
            probs = probs_of(predict, inputs).float().numpy()
        parts["confidence"].append(unconfidence(probs))
        for k, v in (tensor_parts(inputs[0].numpy(), params) if params else {}).items():
            parts.setdefault(k, []).append(v)
    return calibrate({k: np.concatenate(v) for k, v in parts.items()}, params)


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
    """`combined` of all parts as one function of (probs, x) for the service: the PPCA distance
    folded into one quadratic form, the parameters as arrays once; the same numbers as the
    part functions above (to float rounding) in a third of the numpy calls."""
    parts = {k: (float(v["median"]), float(v["scale"])) for k, v in ood["parts"].items()}
    conf = parts["confidence"]
    model = ood.get("model")
    if model is None:
        return lambda probs, x=None: (unconfidence(probs) - conf[0]) / conf[1]
    pca, stats = model["input"], model["statistics"]
    w = np.asarray(pca["components"], np.float64)
    d = w.shape[1]
    rest = 1 / float(pca["residual_variance"])
    form = (w.T * (1 / np.asarray(pca["variances"]) - rest)) @ w + np.eye(d) * rest
    form, mean = form / d, np.asarray(pca["mean"])
    s_mean, s_form = np.asarray(stats["mean"]), np.asarray(stats["precision"])
    (i0, i1), (s0, s1) = parts["input"], parts["statistics"]

    def score(probs: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
        out = (unconfidence(probs) - conf[0]) / conf[1]
        if x is None:
            return out
        c = summary(x) - mean
        out = np.maximum(out, (((c @ form) * c).sum(1) - i0) / i1)
        z = statistics(x) - s_mean
        return np.maximum(out, (((z @ s_form) * z).sum(1) - s0) / s1)

    return score
