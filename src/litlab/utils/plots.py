"""Figures that need no display: matplotlib's `Figure` (no pyplot state, no GUI backend), and
one image of many equal panels. Drawn by the inspect callbacks and the kinds' samples figures
(litlab.tasks.figures)."""


def figure(width: float, height: float):
    """A matplotlib figure that needs no display (no pyplot state, no GUI backend)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def mosaic(panels, labels: list[str], colors: list[str] | None = None, inches: float = 1.4):
    """Equal-size panels (H, W, 3 floats in [0, 1]) as one image, at most 8 a row, each with its
    label above: one axes in all (one axes per panel made a 16-panel figure ~10x slower to
    draw, a cost every `callbacks=inspect` run paid)."""
    import numpy as np

    n = len(panels)
    cols, (h, w) = min(n, 8), panels[0].shape[:2]
    rows = -(-n // cols)
    gap_x, gap_y = max(1, round(w * 0.06)), max(2, round(h * 0.2))  # gap_y: the labels' room
    canvas = np.ones((rows * (h + gap_y), cols * (w + gap_x) - gap_x, 3))
    for k, panel in enumerate(panels):
        r, c = divmod(k, cols)
        top, left = r * (h + gap_y) + gap_y, c * (w + gap_x)
        canvas[top : top + h, left : left + w] = panel
    fig = figure(inches * cols, inches * cols * canvas.shape[0] / canvas.shape[1])
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(canvas.clip(0, 1), interpolation="nearest")
    ax.axis("off")
    for k, label in enumerate(labels):
        r, c = divmod(k, cols)
        x, y = c * (w + gap_x) + w / 2, r * (h + gap_y) + gap_y * 0.85 - 0.5  # pixel edges
        color = colors[k] if colors else "black"
        ax.text(x, y, label, ha="center", va="bottom", fontsize=7, color=color)
    return fig
