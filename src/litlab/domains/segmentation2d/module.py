"""2D segmentation: DiceCE loss on slices or images, Dice per whole item. An evaluation batch
holds one item (the slices of a volume, or one image: litlab.domains.segmentation2d.data), and its Dice is that
item's, so `val/dice` (the monitor) is the mean over items of the mean over foreground classes,
as for 3D segmentation; `val/dice_K` is class K's."""

import torch
from torchmetrics import MetricCollection
from torchmetrics.segmentation import DiceScore

from litlab.bounds import NonNegFloat
from litlab.models.base import LitModule
from litlab.tasks import IMAGE_SEGMENTATION
from litlab.utils.tensors import class_map


class ItemDice(DiceScore):
    """Dice of each batch as one item (its slices stacked: a volume); `index`: one foreground
    class's (Lightning logs scalars only), else the mean over the foreground classes."""

    def __init__(self, num_classes: int, index: int | None = None):
        average = "macro" if index is None else "none"
        super().__init__(num_classes, include_background=False, average=average,
                         input_format="index")  # fmt: skip
        self.index = index

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        super().update(preds[None], target[None])

    def compute(self) -> torch.Tensor:
        value = super().compute()
        return value if self.index is None else value[self.index - 1]


class ImageSegmenter(LitModule):
    kinds = (IMAGE_SEGMENTATION,)
    metric_names = ("dice", "dice_*")
    batch_is_item = True  # the metrics' update takes one item a call (ItemDice)

    def __init__(
        self,
        net,
        optimizer,
        num_classes: int,
        scheduler=None,
        dice_weight: NonNegFloat = 1.0,
        ce_weight: NonNegFloat = 1.0,
        monitor: str = "val/dice",
        **kwargs,
    ):
        self.num_classes = num_classes
        super().__init__(net, optimizer, scheduler, monitor=monitor, **kwargs)
        from monai.losses import DiceCELoss

        self.loss = DiceCELoss(
            to_onehot_y=True, softmax=True, batch=True, lambda_dice=dice_weight,
            lambda_ce=ce_weight,
        )  # fmt: skip

    def make_metrics(self) -> MetricCollection:
        metrics = {"dice": ItemDice(self.num_classes)}
        metrics |= {f"dice_{k}": ItemDice(self.num_classes, k) for k in range(1, self.num_classes)}
        return MetricCollection(metrics, compute_groups=False)

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """DiceCE of (N, classes, H, W) scores against (N, H, W) labels (also distillation's
        label term)."""
        return self.loss(logits, labels[:, None])

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = self.task_loss(logits, y)
        self.log_step("train", loss, class_map(logits), y, len(x))
        return loss

    def eval_step(self, split: str, batch) -> None:
        x, y = batch
        logits = self(x)
        self.log_step(split, self.task_loss(logits, y), class_map(logits), y, len(x))

    def predict_step(self, batch, batch_idx) -> dict[str, torch.Tensor]:
        """One row per item: its Dice (mean over foreground classes, and each class's) and
        predicted pixels per class."""
        from torchmetrics.functional.segmentation import dice_score

        x, y = batch
        pred = class_map(self(x))
        dice = dice_score(pred[None], y[None], self.num_classes, include_background=False,
                          average="none", input_format="index")  # fmt: skip
        out = {"dice": dice.nanmean(1)}
        for k in range(1, self.num_classes):
            out[f"dice_{k}"] = dice[:, k - 1]
            out[f"pixels_{k}"] = (pred == k).sum().view(1)
        return out
