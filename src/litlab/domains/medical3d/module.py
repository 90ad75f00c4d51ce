"""3D medical modules: volume segmentation (DiceCE loss, per-class Dice, sliding-window
inference on whole volumes, NIfTI masks on predict) and volume classification (accuracy, AUROC).

Metrics are torchmetrics (synced across DDP ranks); evaluation loaders never pad under DDP, so
every volume counts exactly once.
"""

import logging
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC
from torchmetrics.functional.segmentation import dice_score
from torchmetrics.segmentation import DiceScore

from litlab.bounds import NonNegFloat, PosInt, Probability
from litlab.models.base import Classifier, LitModule
from litlab.tasks import VOLUME_CLASSIFICATION, VOLUME_SEGMENTATION

log = logging.getLogger(__name__)


class ClassDice(DiceScore):
    """Mean Dice over volumes of one foreground class (Lightning logs scalars only)."""

    def __init__(self, num_classes: int, index: int):
        super().__init__(
            num_classes, include_background=False, average="none", input_format="index"
        )
        self.index = index

    def compute(self) -> torch.Tensor:
        return super().compute()[self.index - 1]


def hydra_output_dir() -> Path | None:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None


class VolumeSegmenter(LitModule):
    """`val/dice` (the monitor) is the mean over volumes of the mean over foreground classes;
    `val/dice_K` is class K's mean over volumes."""

    kinds = (VOLUME_SEGMENTATION,)

    metric_names = ("dice", "dice_*")

    def __init__(
        self,
        net,
        optimizer,
        num_classes: int,
        patch_size,
        scheduler=None,
        sw_batch_size: PosInt = 4,
        sw_overlap: Probability = 0.25,
        sw_mode: Literal["constant", "gaussian"] = "gaussian",
        dice_weight: NonNegFloat = 1.0,
        ce_weight: NonNegFloat = 1.0,
        batch_dice: bool = True,
        mask_dir: str | None = None,
        **kwargs,
    ):
        self.num_classes = num_classes
        super().__init__(net, optimizer, scheduler, **kwargs)
        from monai.losses import DiceCELoss

        self.loss = DiceCELoss(
            to_onehot_y=True,
            softmax=True,
            batch=batch_dice,
            lambda_dice=dice_weight,
            lambda_ce=ce_weight,
        )
        self.patch_size = tuple(int(p) for p in patch_size)
        self.mask_dir = Path(mask_dir) if mask_dir else None

    def make_metrics(self) -> MetricCollection:
        metrics = {
            "dice": DiceScore(
                self.num_classes, include_background=False, average="macro", input_format="index"
            )
        }
        metrics |= {f"dice_{k}": ClassDice(self.num_classes, k) for k in range(1, self.num_classes)}
        return MetricCollection(metrics, compute_groups=False)

    def training_step(self, batch, batch_idx):
        x, y = batch["image"], batch["label"]
        logits = self(x)
        loss = self.loss(logits, y)
        self.log_step("train", loss, logits.argmax(1), y[:, 0], len(x))
        return loss

    def distill_scores(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(per-voxel class scores of a training batch, its label volumes): what
        compress=distill's soft term compares with the teacher's, voxel by voxel."""
        return self(batch["image"]), batch["label"]

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The label term of distillation: this module's own DiceCE, as in training."""
        return self.loss(logits, labels)

    def infer(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of whole volumes of any size, by overlapping patch-sized windows."""
        from monai.inferers import sliding_window_inference

        h = self.hparams
        return sliding_window_inference(
            x, self.patch_size, h.sw_batch_size, self, overlap=h.sw_overlap, mode=h.sw_mode
        )

    def eval_step(self, split: str, batch):
        x, y = batch["image"], batch["label"]
        logits = self.infer(x)
        self.log_step(split, self.loss(logits, y), logits.argmax(1), y[:, 0], len(x))

    def on_predict_start(self) -> None:
        if self.mask_dir is None and (out := hydra_output_dir()) is not None:
            self.mask_dir = out / "masks"

    def predict_step(self, batch, batch_idx) -> dict[str, torch.Tensor]:
        """Per-volume Dice and predicted voxel counts, by case name; masks go to `mask_dir`."""
        x, y = batch["image"], batch["label"]
        pred = self.infer(x).argmax(1)
        dice = dice_score(
            pred,
            y[:, 0],
            self.num_classes,
            include_background=False,
            average="none",
            input_format="index",
        )
        if self.mask_dir is not None:
            self.write_masks(pred, batch)
        # the case id of the mask file (masks/<case>.nii.gz) and of data_split.json
        cases = [n.removesuffix(".gz").removesuffix(".nii") for n in batch["name"]]
        out = {"case": cases, "dice": dice.nanmean(1)}
        for k in range(1, self.num_classes):
            out[f"dice_{k}"] = dice[:, k - 1]
            out[f"voxels_{k}"] = (pred == k).flatten(1).sum(1)
        return out

    def write_masks(self, pred: torch.Tensor, batch) -> None:
        from litlab.domains.medical3d.nifti import write_mask

        self.mask_dir.mkdir(parents=True, exist_ok=True)
        for i in range(len(pred)):
            source, name = batch["path"][i], batch["name"][i]
            name = name if name.endswith((".nii", ".nii.gz")) else name + ".nii.gz"
            write_mask(
                pred[i].cpu().numpy(),
                self.mask_dir / name,
                batch["affine"][i].cpu().double().numpy(),
                like=source or None,
            )


class VolumeClassifier(Classifier):
    """Cross-entropy; accuracy and one-vs-rest macro AUROC (binary AUROC for two classes)."""

    kinds = (VOLUME_CLASSIFICATION,)

    metric_names = ("acc", "auroc")

    def __init__(
        self,
        net,
        optimizer,
        num_classes: int,
        scheduler=None,
        label_smoothing: Probability = 0.0,
        **kwargs,
    ):
        self.num_classes = num_classes
        super().__init__(net, optimizer, scheduler, **kwargs)

    def make_metrics(self) -> MetricCollection:
        return MetricCollection(
            {
                "acc": MulticlassAccuracy(self.num_classes, average="micro"),
                "auroc": MulticlassAUROC(self.num_classes),
            }
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing)
        self.log_step("train", loss, self.metric_preds(logits), y, len(y))  # log_step detaches
        return loss

    def metric_preds(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(1)  # AUROC needs the probabilities
