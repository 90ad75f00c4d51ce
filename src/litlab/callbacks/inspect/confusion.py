"""Which classes get confused: the confusion matrix of the last validation epoch of a fit and
of every test, as a PNG, a CSV, and a per-class precision/recall/F1 table (CSV)."""

import csv

import torch
from torchmetrics.classification import MulticlassConfusionMatrix

from litlab.callbacks.inspect.base import TaskCallback, save_figure
from litlab.tasks.figures import figure


class ConfusionMatrix(TaskCallback):
    """Counts are torchmetrics' (synced across DDP ranks), so the test matrix sums to the test
    set and its diagonal over the total equals `test/acc`. Rows are true classes."""

    inspects = "confusion"

    def __init__(self, num_classes: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes  # null: the datamodule's dims
        self.matrix: MulticlassConfusionMatrix | None = None

    def _reset(self, trainer, pl_module) -> None:
        n = self.num_classes or trainer.datamodule.dims["num_classes"]
        self.matrix = MulticlassConfusionMatrix(n, validate_args=False).to(pl_module.device)
        self._logits = None
        batched = self.kind(trainer).batched_tensor
        if batched and getattr(self, "_hook", None) is None:
            # the step's own forward (one per batch) is captured: no second forward pass
            self._hook = pl_module.register_forward_hook(self._capture)

    def _capture(self, module, args, output) -> None:
        if self._logits is None:  # the step's forward; not other callbacks' later ones
            self._logits = output

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._logits = None

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._logits = None

    def _update(self, pl_module, batch, split: str) -> None:
        if getattr(self, "_hook", None) is not None and self._logits is not None:
            logits, target = self._logits, batch[1]
        else:
            logits, target = pl_module.scores(batch, split)
        self.matrix.update(logits.argmax(1), target)

    def _unhook(self) -> None:
        if getattr(self, "_hook", None) is not None:
            self._hook.remove()
            self._hook = None

    def on_validation_epoch_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._reset(trainer, pl_module)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ):
        if not trainer.sanity_checking:
            self._update(pl_module, batch, "val")

    def on_validation_epoch_end(self, trainer, pl_module):
        self._unhook()
        if trainer.state.fn == "validate" and self.matrix is not None:  # trainer.validate
            self.write(trainer, "val")

    def on_fit_end(self, trainer, pl_module):
        if self.matrix is not None and self.matrix.update_called:  # the last val epoch
            self.write(trainer, "val")

    def on_test_epoch_start(self, trainer, pl_module):
        self._reset(trainer, pl_module)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._update(pl_module, batch, "test")

    def on_test_epoch_end(self, trainer, pl_module):
        self._unhook()
        self.write(trainer, "test")

    def write(self, trainer, split: str) -> None:
        counts = self.matrix.compute().cpu().long()  # every rank joins the sync
        self.matrix = None
        if not trainer.is_global_zero:
            return
        out = self.out_dir(trainer)
        n = len(counts)
        with open(out / f"confusion_{split}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["true\\pred", *range(n)])
            w.writerows([k, *counts[k].tolist()] for k in range(n))
        with open(out / f"per_class_{split}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["class", "precision", "recall", "f1", "support"])
            w.writerows(per_class(counts))
        save_figure(trainer, plot_confusion(counts, split), f"confusion_{split}", tight=False)


def per_class(counts: torch.Tensor) -> list[list]:
    """Rows of (class, precision, recall, F1, support); 0 where a class is never predicted."""
    tp = counts.diag().double()
    predicted, support = counts.sum(0).double(), counts.sum(1).double()
    precision = torch.where(predicted > 0, tp / predicted.clamp(min=1), 0.0)
    recall = torch.where(support > 0, tp / support.clamp(min=1), 0.0)
    f1 = torch.where(
        precision + recall > 0, 2 * precision * recall / (precision + recall).clamp(min=1e-12), 0.0
    )
    return [
        [
            k,
            round(precision[k].item(), 4),
            round(recall[k].item(), 4),
            round(f1[k].item(), 4),
            int(support[k]),
        ]
        for k in range(len(counts))
    ]


def plot_confusion(counts: torch.Tensor, split: str):
    n = len(counts)
    size = min(2 + 0.45 * n, 12)
    fig = figure(size, size)
    # margins in inches for the labels and title (saved without the costly tight box)
    ax = fig.add_axes((0.75 / size, 0.6 / size, 1 - 0.95 / size, 1 - 1.05 / size))
    ax.imshow(counts.numpy(), cmap="Blues")
    if n <= 20:  # numbers stay readable
        peak = counts.max().item() or 1
        for i in range(n):
            for j in range(n):
                v = counts[i, j].item()
                ax.text(
                    j,
                    i,
                    v,
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if v > peak / 2 else "black",
                )
    ax.set(
        xlabel="predicted",
        ylabel="true",
        xticks=range(n),
        yticks=range(n),
        title=f"{split}: {int(counts.diag().sum())}/{int(counts.sum())} correct",
    )
    return fig
