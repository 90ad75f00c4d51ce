"""2D segmentation: DiceCE loss on slices or images, Dice per whole item. An evaluation batch
holds one item (the slices of a volume, or one image: litlab.domains.segmentation2d.data), and its Dice is that
item's, so `val/dice` (the monitor) is the mean over items of the mean over foreground classes,
as for 3D segmentation; `val/dice_K` is class K's."""

import torch
from torchmetrics import MetricCollection
from torchmetrics.functional.segmentation import dice_score
from torchmetrics.segmentation import DiceScore

from litlab.bounds import NonNegFloat
from litlab.domains.segmentation2d.slices import crop_to
from litlab.models import LitModule
from litlab.tasks import IMAGE_SEGMENTATION
from litlab.tasks.kind import class_map


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
        return self.eval_step("train", batch)

    def eval_step(self, split: str, batch) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = self.task_loss(logits, y)
        self.log_step(split, loss, class_map(logits), y, len(x))
        return loss

    def predict_step(self, batch, batch_idx) -> dict[str, torch.Tensor]:
        """A row per slice (an image is one), in the order of the datamodule's `sources`
        (its volume and slice, or its image): `item_dice`, its item's Dice (the unit of the
        metric `dice`: averaged over items, not rows), the slice's own `dice` and `dice_K`
        (NaN where neither label nor prediction holds the class) and predicted `pixels_K`.
        With `output_dir` set (eval.py), the predicted label maps go to its masks/ folder as
        PNGs named by their source, at their source's size."""
        x, y = batch
        pred = class_map(self(x))

        def dice(p, t):
            return dice_score(p, t, self.num_classes, include_background=False,
                              average="none", input_format="index")  # fmt: skip

        per_slice, item = dice(pred, y), dice(pred[None], y[None])
        out = {"item_dice": item.nanmean(1).expand(len(pred)), "dice": per_slice.nanmean(1)}
        classes = range(1, self.num_classes)
        out |= {f"dice_{k}": per_slice[:, k - 1] for k in classes}
        out |= {f"pixels_{k}": (pred == k).flatten(1).sum(1) for k in classes}
        if self.output_dir is not None:
            self.write_masks(pred, batch_idx)
        return out

    def write_masks(self, pred: torch.Tensor, index: int) -> None:
        """Item `index` of the predicted split's label maps as 8-bit PNGs of class ids, the
        padding cropped off (the datamodule names them and knows each item's size)."""
        from PIL import Image

        dm = self.trainer.datamodule
        split = dm.predict_split
        names, shape = dm.mask_files(split)[index], dm.shapes[dm.split[split][index]]
        folder = self.output_dir / "masks"
        folder.mkdir(parents=True, exist_ok=True)
        for name, mask in zip(names, pred.to(torch.uint8).cpu().numpy()):
            Image.fromarray(crop_to(mask, shape)).save(folder / name)
