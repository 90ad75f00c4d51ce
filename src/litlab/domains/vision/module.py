"""Image classification: cross-entropy with label smoothing, optional mixup/cutmix and EMA
weights (the recipe of torchvision's classification references), accuracy and macro-F1."""

from typing import Annotated

import torch.nn.functional as F
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
from torchvision.transforms import v2

from litlab.bounds import Interval, NonNegFloat, PosInt, Probability
from litlab.models import Classifier
from litlab.tasks import IMAGE_CLASSIFICATION


class ImageClassifier(Classifier):
    kinds = (IMAGE_CLASSIFICATION,)

    def __init__(
        self,
        net,
        optimizer,
        num_classes: PosInt,
        scheduler=None,
        label_smoothing: Probability = 0.0,
        mixup_alpha: NonNegFloat = 0.0,
        cutmix_alpha: NonNegFloat = 0.0,
        ema_decay: Annotated[float, Interval(gt=0, lt=1)] | None = None,
        **kwargs,
    ):
        self.num_classes = num_classes
        super().__init__(net, optimizer, scheduler, **kwargs)
        mixes = [
            cls(alpha=a, num_classes=num_classes)
            for cls, a in ((v2.MixUp, mixup_alpha), (v2.CutMix, cutmix_alpha))
            if a > 0
        ]
        self.mix = v2.RandomChoice(mixes) if mixes else None

    def make_metrics(self) -> MetricCollection:
        return MetricCollection(
            {
                "acc": MulticlassAccuracy(self.num_classes, average="micro"),
                "f1": MulticlassF1Score(self.num_classes, average="macro"),
            }
        )

    def configure_callbacks(self):
        if self.hparams.ema_decay is None:
            return []
        from lightning.pytorch.callbacks import EMAWeightAveraging

        return [EMAWeightAveraging(decay=self.hparams.ema_decay)]

    def training_step(self, batch, batch_idx):
        x, y = batch
        target = y
        if self.mix is not None:
            x, target = self.mix(x, y)  # target becomes soft labels
        logits = self(x)
        loss = F.cross_entropy(logits, target, label_smoothing=self.hparams.label_smoothing)
        self.log_step("train", loss, self.metric_preds(logits), y, len(y))
        return loss
