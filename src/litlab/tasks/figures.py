"""`callbacks=inspect`'s samples figures that kinds share (`Kind.samples_figure`): what the
predictions look like on the test split. A figure collects from each test batch (`collect`,
rank 0 and every rank alike) and draws once at the end (`draw`: a matplotlib figure, written as
inspect/samples.png); `tables` are CSV files written beside it, `tight` whether the figure's
box is trimmed (a second drawing; a mosaic fills its figure already).

A kind with a figure of its own writes the class in its module (litlab.tasks.regression.
Residuals, litlab.tasks.image_segmentation.Overlays). torch and matplotlib are imported where
used: a kind's declarations stay light."""


class SamplesFigure:
    tight = True

    def __init__(self, count: int = 16) -> None:
        self.count, self.held = count, []

    def room(self) -> int:
        """How many more samples the figure takes."""
        return self.count - sum(len(part[0]) for part in self.held)

    def tables(self, trainer) -> dict[str, list[list]]:
        return {}


class ImageGrid(SamplesFigure):
    """The first test images, titled with the true and predicted class (green when right)."""

    tight = False

    def collect(self, module, batch) -> None:
        keep = self.room()
        if keep > 0:
            x, y = batch[0][:keep], batch[1][:keep]
            self.held.append((x.float().cpu(), y.cpu(), module(x).argmax(1).cpu()))

    def draw(self, trainer):
        import torch

        from litlab.utils.plots import mosaic

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
        import numpy as np

        from litlab.utils.plots import figure

        x, y, pred = ([v for t in part for v in t] for part in zip(*self.held))
        n = len(x)
        fig = figure(4, 2 * n)
        for i in range(n):
            d = x[i].shape[1] // 2
            for j, (mask, name) in enumerate(((y[i], "true"), (pred[i], "predicted"))):
                ax = fig.add_subplot(n, 2, 2 * i + j + 1)
                ax.imshow(x[i][0, d].numpy(), cmap="gray")
                m = mask[d].numpy().astype(float)
                ax.imshow(np.ma.masked_where(m == 0, m), cmap="autumn", alpha=0.5)
                ax.set_title(f"volume {i}: {name}", fontsize=7)
                ax.axis("off")
        return fig


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
        from litlab.utils.plots import figure

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
