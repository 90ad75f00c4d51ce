"""`callbacks=inspect`'s samples figures that kinds share (`Kind.samples_figure`; a kind with
a figure of its own writes the class in its module): each collects from every test batch
(`collect`) and draws once at the end (`draw`: inspect/samples.png); `tables` are CSV files
written beside it, `tight` whether its box is trimmed (a second drawing; a mosaic fills its
figure already). torch and matplotlib are imported where used: a kind's declarations stay light."""


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


def mask_pairs(rows: list[tuple], what: str):
    """A row of two panels per (image, true mask, predicted mask) of 2D arrays: each mask's
    classes over the grey image, the background left clear."""
    import numpy as np

    fig = figure(4, 2 * len(rows))
    for i, (image, true, pred) in enumerate(rows):
        for j, (mask, name) in enumerate(((true, "true"), (pred, "predicted"))):
            ax = fig.add_subplot(len(rows), 2, 2 * i + j + 1)
            ax.imshow(image, cmap="gray")
            m = np.asarray(mask, dtype=float)
            ax.imshow(np.ma.masked_where(m == 0, m), cmap="autumn", alpha=0.5)
            ax.set_title(f"{what} {i}: {name}", fontsize=7)
            ax.axis("off")
    return fig


class SamplesFigure:
    tight = True

    def __init__(self, count: int = 16) -> None:
        self.count, self.held = count, []

    def room(self) -> int:
        """How many more samples the figure takes."""
        return self.count - sum(len(part[0]) for part in self.held)

    def collect(self, module, batch) -> None:
        """The first test samples of (inputs, classes) batches, with their predicted class."""
        keep = self.room()
        if keep > 0:
            x, y = batch[0][:keep], batch[1][:keep]
            self.held.append((x.float().cpu(), y.cpu(), module(x).argmax(1).cpu()))

    def tables(self, trainer) -> dict[str, list[list]]:
        return {}


class ImageGrid(SamplesFigure):
    """The first test images, titled with the true and predicted class (green when right)."""

    tight = False

    def draw(self, trainer):
        import torch

        x, y, pred = (torch.cat(t) for t in zip(*self.held))
        lo = x.flatten(1).amin(1).view(-1, 1, 1, 1)
        hi = x.flatten(1).amax(1).view(-1, 1, 1, 1)
        x = (x - lo) / (hi - lo + 1e-12)  # normalized inputs back to [0, 1]
        rgb = x[:, :1].expand(-1, 3, -1, -1) if x.shape[1] == 1 else x[:, :3]
        labels = [f"true {int(t)} / pred {int(p)}" for t, p in zip(y, pred)]
        colors = ["green" if int(t) == int(p) else "red" for t, p in zip(y, pred)]
        return mosaic(list(rgb.permute(0, 2, 3, 1).numpy()), labels, colors)


class VolumeSlices(SamplesFigure):
    """The middle axial slice of the first test volumes: the true mask (left) and the
    predicted one (right), over the image. Volumes may differ in size: one entry each."""

    def collect(self, module, batch) -> None:
        keep = self.room()
        if keep > 0:
            x, y = batch["image"][:keep], batch["label"][:keep, 0]
            self.held.append((x.float().cpu(), y.cpu(), module.infer(x).argmax(1).cpu()))

    def draw(self, trainer):
        rows = []
        for image, true, pred in zip(*([v for t in part for v in t] for part in zip(*self.held))):
            d = image.shape[1] // 2
            rows.append((image[0, d].numpy(), true[d].numpy(), pred[d].numpy()))
        return mask_pairs(rows, "volume")


class NodeAccuracy(SamplesFigure):
    """Node classification: the test accuracy of each class, as a bar chart and
    per_class_accuracy.csv (a graph's nodes are no pictures)."""

    def collect(self, module, batch) -> None:
        logits, y = module.scores(batch, "test")
        self.held.append((logits.argmax(1).cpu(), y.cpu()))

    def rows(self, trainer) -> list[list]:
        import torch

        pred, y = (torch.cat(t) for t in zip(*self.held))
        rows = []
        for k in range(trainer.datamodule.dims["num_classes"]):
            mine = y == k
            accuracy = (pred[mine] == k).float().mean().item() if mine.any() else float("nan")
            rows.append([k, int(mine.sum()), round(accuracy, 4)])
        return rows

    def tables(self, trainer) -> dict[str, list[list]]:
        return {"per_class_accuracy.csv": [["class", "nodes", "accuracy"], *self.rows(trainer)]}

    def draw(self, trainer):
        rows = self.rows(trainer)
        fig = figure(max(4, 0.5 * len(rows)), 3)
        ax = fig.add_subplot()
        ax.bar([r[0] for r in rows], [r[2] for r in rows], color="tab:blue")
        ax.set(
            xlabel="class",
            ylabel="test accuracy",
            ylim=(0, 1),
            xticks=range(len(rows)),
            title="node classification: accuracy per class",
        )
        return fig
