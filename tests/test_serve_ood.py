"""The out-of-distribution score's arithmetic (litlab.export.ood): the threshold leaves at most
5% of the test split above it, and the service's fused scorer gives the export's numbers."""

import numpy as np

from litlab.export import ood


def fitted(rng, n=400):
    train = rng.normal(0.2, 0.5, size=(n, 1, 8, 8))
    test = rng.normal(0.2, 0.5, size=(n // 2, 1, 8, 8))
    model = {
        "input": ood.fit_input(ood.summary(train)),
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
