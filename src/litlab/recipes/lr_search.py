"""The LR range test around Lightning's finder (`tune=lr`, recipes/tuning): its steps bounded by
nothing but their number, what ended it, and its loss curve read (where the loss still falls,
the suggestion in that range) and plotted."""

import contextlib
from pathlib import Path


def steepest_descent(
    lrs, losses, smooth: int = 5, skip_begin: int = 5
) -> tuple[int, int, int] | None:
    """(suggested, start, end) indices of an LR range test: the suggestion and the falling range.

    The loss is smoothed again (a centered moving average of `smooth` points on top of
    Lightning's running average), its descent measured against log10(lr) (the test's own
    spacing), and only the range where the smoothed loss falls is searched: from its highest
    point (after `skip_begin`: Lightning's running average starts biased) to its minimum. Lightning's `suggestion()` takes the steepest slope of the
    whole curve, which after the minimum can land on the blow-up's edge (the curve's peak)."""
    import numpy as np

    lrs, losses = np.asarray(lrs, float), np.asarray(losses, float)
    keep = np.isfinite(losses) & (lrs > 0)
    lrs, losses, index = lrs[keep], losses[keep], np.flatnonzero(keep)
    if len(losses) < skip_begin + 3:
        return None
    k = max(1, min(smooth, len(losses) // 10))
    padded = np.pad(losses, (k // 2, k - 1 - k // 2), mode="edge")
    smoothed = np.convolve(padded, np.ones(k) / k, mode="valid")
    bottom = skip_begin + int(np.argmin(smoothed[skip_begin:]))
    if bottom - skip_begin < 2:  # no falling range: the loss only rises
        return None
    top = skip_begin + int(np.argmax(smoothed[skip_begin:bottom]))
    if bottom - top < 2:
        return None
    slope = np.gradient(smoothed, np.log10(lrs))
    best = top + int(np.argmin(slope[top:bottom]))
    return int(index[best]), int(index[top]), int(index[bottom])


def plot_lr_curve(results: dict, best: int, top: int, bottom: int, path: Path) -> None:
    """The loss against the lr (log axis), the falling range shaded, the suggestion marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lrs, losses = results["lr"], results["loss"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(lrs, losses)
    ax.axvspan(lrs[top], lrs[bottom], color="tab:green", alpha=0.1, label="loss still falling")
    ax.plot(
        lrs[best],
        losses[best],
        "o",
        color="tab:red",
        markersize=9,
        label=f"suggested lr {lrs[best]:.3g} (steepest descent)",
    )
    ax.set(xscale="log", xlabel="learning rate", ylabel="training loss (smoothed)")
    ax.legend()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


@contextlib.contextmanager
def epochs_unbounded(trainer):
    """Lightning's finder stops after `num_training` steps but leaves the run's `max_epochs` in
    place, so a short run ended its search early (digits, max_epochs=2: 42 of 100 steps, no
    falling range). While it searches, only its steps bound it: the training data is cycled
    (one epoch after another) until they are done; the run's limit is back afterwards."""
    loop = trainer.fit_loop
    before = loop.max_epochs
    loop.max_epochs = -1
    try:
        yield
    finally:
        loop.max_epochs = before


def diverged(losses, threshold: float | None) -> bool:
    """Whether Lightning's finder stopped on its early-stop rule: the smoothed loss above
    `threshold` times its best so far."""
    return threshold is not None and len(losses) > 1 and losses[-1] > threshold * min(losses[:-1])


def passes(steps: int, trainer) -> str:
    """', 4.8 passes over the 21 training batches' when the search outlasts an epoch."""
    batches, used = trainer.num_training_batches, steps * trainer.accumulate_grad_batches
    if not isinstance(batches, int) or batches <= 0 or used <= batches:
        return ""
    return f", {used / batches:.1f} passes over the {batches} training batch" + "es" * (batches > 1)
