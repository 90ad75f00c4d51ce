"""3D medical modules: volume segmentation (DiceCE loss, per-class Dice, sliding-window
inference on whole volumes, NIfTI masks on predict) and volume classification (accuracy, AUROC).

Metrics are torchmetrics (synced across DDP ranks); evaluation loaders never pad under DDP, so
every volume counts exactly once.
"""

import logging
import warnings
from itertools import combinations
from pathlib import Path
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC
from torchmetrics.functional.segmentation import dice_score
from torchmetrics.segmentation import DiceScore

from litlab.bounds import MaxLen, NonNegFloat, PosInt, Probability
from litlab.domains.medical3d.nifti import case_id, write_mask
from litlab.models import Classifier, LitModule
from litlab.tasks import VOLUME_CLASSIFICATION, VOLUME_SEGMENTATION
from litlab.tasks.kind import class_map

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


class HD95(Metric):
    """MONAI's 95th-percentile Hausdorff distance in voxels, mean over volumes of the mean over
    foreground classes (`index`: that class alone). A class the label holds and the prediction
    misses counts as the volume's diagonal (the worst a prediction can be, where MONAI gives
    nan); a class the label lacks is undefined and left out. Summed across DDP ranks."""

    full_state_update = False
    higher_is_better = False

    def __init__(self, num_classes: int, index: int | None = None):
        super().__init__()
        self.num_classes, self.index = num_classes, index
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """`preds` and `target`: label maps (B, D, H, W) of whole volumes."""
        from monai.metrics import compute_hausdorff_distance

        pred = F.one_hot(preds.long(), self.num_classes).movedim(-1, 1)
        true = F.one_hot(target.long(), self.num_classes).movedim(-1, 1)
        with warnings.catch_warnings():  # MONAI warns for every empty class (handled below)
            warnings.simplefilter("ignore")
            hd = compute_hausdorff_distance(pred, true, include_background=False, percentile=95)
        held = true[:, 1:].flatten(2).any(2)
        missed = held & ~pred[:, 1:].flatten(2).any(2)
        diagonal = float(torch.tensor(preds.shape[1:], dtype=torch.float64).norm())
        hd = torch.where(missed, diagonal, hd.double().to(preds.device))
        hd = torch.where(held, hd, torch.nan)
        if self.index is not None:
            hd = hd[:, self.index - 1 : self.index]
        per_volume = hd.nanmean(1)
        defined = ~per_volume.isnan()
        self.total += per_volume[defined].sum()
        self.count += defined.sum()

    def compute(self) -> torch.Tensor:
        return (self.total / self.count).float() if self.count else torch.tensor(float("nan"))


class VolumeSegmenter(LitModule):
    """`val/dice` (the monitor) is the mean over volumes of the mean over foreground classes;
    `val/dice_K` is class K's mean over volumes; `hd95` and `hd95_K` the same of the 95th
    percentile Hausdorff distance (validation and test: whole volumes, not training patches).

    `mirror_axes` (nnU-Net's test-time mirroring): test and predict also read each volume
    flipped along every combination of those spatial axes (0, 1, 2: D, H, W) and average the
    class probabilities. Validation, which only ranks epochs, reads once (8 reads of every
    volume each epoch would cost more than the epoch); so do exported and served models."""

    kinds = (VOLUME_SEGMENTATION,)

    metric_names = ("dice", "dice_*", "hd95", "hd95_*")
    eval_only_metrics = ("hd95", "hd95_*")

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
        mirror_axes: Annotated[list[Literal[0, 1, 2]], MaxLen(3)] = (),
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
        metrics["hd95"] = HD95(self.num_classes)
        metrics |= {f"hd95_{k}": HD95(self.num_classes, k) for k in range(1, self.num_classes)}
        return MetricCollection(metrics, compute_groups=False)

    def training_step(self, batch, batch_idx):
        x, y = batch["image"], batch["label"]
        logits = self(x)
        loss = self.loss(logits, y)
        self.log_step("train", loss, class_map(logits), y[:, 0], len(x))
        return loss

    def scores(self, batch, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(per-voxel class scores, label volumes): of a training batch's patches (what
        compress=distill's soft term compares with the teacher's, voxel by voxel), or of whole
        volumes by sliding windows."""
        x = batch["image"]
        return (self(x) if split == "train" else self.infer(x)), batch["label"]

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The label term of distillation: this module's own DiceCE, as in training."""
        return self.loss(logits, labels)

    @property
    def test_reads(self) -> int:
        return 2 ** len(set(self.hparams.mirror_axes))  # every subset of the axes flipped

    def infer(self, x: torch.Tensor, mirror: bool = False) -> torch.Tensor:
        """Logits of whole volumes of any size, by overlapping patch-sized windows; `mirror`
        with `mirror_axes`: the log of the class probabilities averaged over mirrored reads."""
        from monai.inferers import sliding_window_inference

        h = self.hparams
        axes = sorted({int(a) + 2 for a in h.mirror_axes}) if mirror else []  # -> tensor dims
        flips = [list(c) for n in range(len(axes) + 1) for c in combinations(axes, n)]
        probs = None
        for dims in flips:
            view = x.flip(dims) if dims else x
            logits = sliding_window_inference(
                view, self.patch_size, h.sw_batch_size, self, overlap=h.sw_overlap, mode=h.sw_mode
            )
            if len(flips) == 1:
                return logits
            p = logits.float().softmax(1)
            p = p.flip(dims) if dims else p
            probs = p if probs is None else probs + p
        return (probs / len(flips)).clamp_min(1e-12).log()

    def eval_step(self, split: str, batch):
        x, y = batch["image"], batch["label"]
        logits = self.infer(x, mirror=split == "test")
        self.log_step(split, self.loss(logits, y), class_map(logits), y[:, 0], len(x))

    def on_predict_start(self) -> None:
        """Masks go to the run's masks/ folder unless `mask_dir` says where."""
        from hydra.core.hydra_config import HydraConfig

        out = self.output_dir
        if out is None and HydraConfig.initialized():
            out = Path(HydraConfig.get().runtime.output_dir)
        if self.mask_dir is None and out is not None:
            self.mask_dir = out / "masks"

    def predict_step(self, batch, batch_idx) -> dict[str, torch.Tensor]:
        """Per-volume Dice and predicted voxel counts, by case name; masks go to `mask_dir`."""
        x, y = batch["image"], batch["label"]
        pred = class_map(self.infer(x, mirror=True))
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
        out = {"case": [case_id(n) for n in batch["name"]], "dice": dice.nanmean(1)}
        for k in range(1, self.num_classes):
            out[f"dice_{k}"] = dice[:, k - 1]
            out[f"voxels_{k}"] = (pred == k).flatten(1).sum(1)
        return out

    def write_masks(self, pred: torch.Tensor, batch) -> None:
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
