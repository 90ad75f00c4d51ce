"""The out-of-distribution score's arithmetic (litlab.export.ood): the threshold leaves at most
5% of the test split above it, and the service's fused scorer gives the export's numbers."""

import numpy as np

from litlab.export import ood


def fitted(rng, n=400):
    train = rng.normal(0.2, 0.5, size=(n, 1, 8, 8))
    test = rng.normal(0.2, 0.5, size=(n // 2, 1, 8, 8))
    model = {
        "input": ood.fit_input(ood.block_means(train)),
        "statistics": ood.fit_statistics(ood.statistics(train)),
    }
    probs = rng.dirichlet(np.ones(10) * 0.3, size=len(test))
    arrays = {k: {n: np.asarray(v) for n, v in p.items()} for k, p in model.items()}
    parts = {"confidence": ood.unconfidence(probs), **ood.tensor_parts(test, arrays)}
    return ood.calibrate(parts, model), parts, arrays


def test_threshold_leaves_at_most_5_percent_of_the_test_split_above_it():
    meta, parts, _ = fitted(np.random.default_rng(0))
    scores = ood.combined(parts, meta)
    assert (scores > meta["threshold"]).mean() <= 0.05
    assert meta["test_exceed_fraction"] == (scores > meta["threshold"]).mean() > 0.03


def test_fused_scorer_equals_the_parts_and_flags_far_inputs():
    rng = np.random.default_rng(1)
    meta, _, arrays = fitted(rng)
    x = rng.normal(0.2, 0.5, size=(30, 1, 8, 8))
    probs = rng.dirichlet(np.ones(10), size=30)
    parts = {"confidence": ood.unconfidence(probs), **ood.tensor_parts(x, arrays)}
    assert np.allclose(ood.scorer(meta)(probs, x), ood.combined(parts, meta), rtol=1e-9)
    blank = np.full((1, 1, 8, 8), 0.2)
    assert ood.scorer(meta)(np.eye(10)[:1], blank)[0] > meta["threshold"]


def test_stored_model_is_compact_and_scores_as_the_float64_fit():
    """What an export stores (`pack_model`: 12-bit whitening, zlib, base64) is a few kB for
    an 8x8 input and moves the distances by under 0.1%; the service's scorer of the stored
    model is the part functions of the model as unpacked."""
    import json

    rng = np.random.default_rng(2)
    train = rng.normal(0.2, 0.5, size=(400, 1, 8, 8)) * rng.uniform(0.05, 2, size=(1, 1, 8, 8))
    full = {
        "input": ood.fit_input(ood.block_means(train)),
        "statistics": ood.fit_statistics(ood.statistics(train)),
    }
    stored = ood.pack_model(full)
    assert len(json.dumps(stored)) < 6000  # the PPCA's lists in JSON took ~70,000
    unpacked = ood.unpack_model(stored)
    x = rng.normal(0.2, 0.6, size=(50, 1, 8, 8))
    exact, kept = ood.tensor_parts(x, full), ood.tensor_parts(x, unpacked)
    for k in exact:
        assert np.allclose(kept[k], exact[k], rtol=1e-3), k
    probs = rng.dirichlet(np.ones(10), size=50)
    parts = {"confidence": ood.unconfidence(probs), **kept}
    meta = ood.calibrate(parts, stored)
    assert np.allclose(ood.scorer(meta)(probs, x), ood.combined(parts, meta), rtol=1e-9)


def test_packed_arrays_from_a_file_are_checked_before_use():
    import base64
    import zlib

    import pytest

    good = ood.pack(np.arange(6.0).reshape(2, 3))
    assert ood.unpack(good).tolist() == [[0, 1, 2], [3, 4, 5]]
    bomb = base64.b64encode(zlib.compress(bytes(8 << 20))).decode()  # 8 MB of zeros
    for bad, words in [
        ({**good, "dtype": "object"}, "has dtype 'object'"),
        ({**good, "shape": [2, 4]}, "does not hold 32 bytes"),
        ({**good, "shape": [2, -3]}, "expected a list of sizes"),
        ({**good, "shape": [1 << 19, 1 << 19]}, "at most 33,554,432"),
        ({**good, "base64": "%%%"}, "does not decode"),
        ({**good, "base64": bomb}, "does not hold 24 bytes"),
        ([[0.0, 1.0]], "is not a packed array"),
    ]:
        with pytest.raises(ValueError, match=words):
            ood.unpack(bad)
