"""What the predictions look like, per domain, on the test set:
- images: a grid of the first N test images titled with the true and predicted class;
- 3D segmentation: the middle slice of the first N volumes, true and predicted masks overlaid;
- node classification: the accuracy of each class (CSV and bar chart);
- a kind that draws its own (`TaskKind.samples_figure`: regression's residual plot)."""

import csv

import torch

from litlab.callbacks.inspect.base import TaskCallback, figure, mosaic, save_figure


class SamplePredictions(TaskCallback):
    inspects = "samples"

    def __init__(self, num_samples: int = 16, **kwargs):
        super().__init__(**kwargs)
        self.num_samples = num_samples
        self._held: list = []
        self._own = None  # the kind's own figure (TaskKind.samples_figure), when it has one

    def on_test_epoch_start(self, trainer, pl_module):
        self._held = []
        own = self.kind(trainer).samples_figure
        self._own = self.kind(trainer).hook("samples_figure")() if own else None

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if self._own is not None:  # the kind draws its own figure
            self._own.collect(pl_module, batch)
            return
        view = self.kind(trainer).samples_view
        if view == "nodes":
            logits, y = pl_module._scores(batch, "test")
            self._held.append((logits.argmax(1).cpu(), y.cpu()))
            return
        held = sum(len(x) for x, _, _ in self._held)
        if held >= self.num_samples:
            return
        keep = self.num_samples - held
        if view == "volume_slices":
            x, y = batch["image"][:keep], batch["label"][:keep, 0]
            pred = pl_module.infer(x).argmax(1)
        else:
            x, y = batch[0][:keep], batch[1][:keep]
            pred = pl_module(x).argmax(1)
        self._held.append((x.float().cpu(), y.cpu(), pred.cpu()))

    def on_test_epoch_end(self, trainer, pl_module):
        own, self._own = self._own, None
        if own is not None:
            if own.held and trainer.is_global_zero:
                save_figure(trainer, own.draw(trainer), "samples")
            return
        held, self._held = self._held, []
        if not held or not trainer.is_global_zero:
            return
        view = self.kind(trainer).samples_view
        if view == "nodes":
            pred, y = (torch.cat(t) for t in zip(*held))
            self.node_accuracy(trainer, pred, y, trainer.datamodule.dims["num_classes"])
            return
        if view == "images":  # a mosaic fills its figure: no tight box needed
            save_figure(trainer, grid(*(torch.cat(t) for t in zip(*held))), "samples", tight=False)
            return
        # volumes may differ in size: one list entry each
        save_figure(
            trainer, slices(*([v for t in part for v in t] for part in zip(*held))), "samples"
        )

    def node_accuracy(self, trainer, pred, y, num_classes: int) -> None:
        rows = []
        for k in range(num_classes):
            mine = y == k
            rows.append(
                [
                    k,
                    int(mine.sum()),
                    round((pred[mine] == k).float().mean().item(), 4)
                    if mine.any()
                    else float("nan"),
                ]
            )
        with open(self.out_dir(trainer) / "per_class_accuracy.csv", "w", newline="") as f:
            csv.writer(f).writerows([["class", "nodes", "accuracy"], *rows])
        fig = figure(max(4, 0.5 * num_classes), 3)
        ax = fig.add_subplot()
        ax.bar([r[0] for r in rows], [r[2] for r in rows], color="tab:blue")
        ax.set(
            xlabel="class",
            ylabel="test accuracy",
            ylim=(0, 1),
            xticks=range(num_classes),
            title="node classification: accuracy per class",
        )
        save_figure(trainer, fig, "samples")


def grid(x: torch.Tensor, y: torch.Tensor, pred: torch.Tensor):
    """The images (each scaled to [0, 1]) titled true / predicted, green when right."""
    lo = x.flatten(1).amin(1).view(-1, 1, 1, 1)
    hi = x.flatten(1).amax(1).view(-1, 1, 1, 1)
    x = (x - lo) / (hi - lo + 1e-12)  # normalized inputs back to [0, 1]
    rgb = x[:, :1].expand(-1, 3, -1, -1) if x.shape[1] == 1 else x[:, :3]
    labels = [f"true {int(t)} / pred {int(p)}" for t, p in zip(y, pred)]
    colors = ["green" if int(t) == int(p) else "red" for t, p in zip(y, pred)]
    return mosaic(list(rgb.permute(0, 2, 3, 1).numpy()), labels, colors)


def slices(x: list, y: list, pred: list):
    """Middle axial slice of each volume: the true mask (left) and the predicted one (right)."""
    import numpy as np

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
