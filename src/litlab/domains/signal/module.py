"""1D signal classification: a small 1D CNN and the module that trains it (cross-entropy;
accuracy and macro-F1), the image classifier's recipe on sequences."""

from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from litlab.bounds import MinLen, PosInt, Probability
from litlab.models import Classifier
from litlab.tasks.signal_classification import SignalClassification


class SignalCNN(nn.Module):
    """Conv1d-BN-ReLU blocks, each halving the sequence, then global average pooling over
    time (any length) and a linear head."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        channels: Annotated[list[PosInt], MinLen(1)] = (16, 32, 64),
        kernel_size: PosInt = 7,
        dropout: Probability = 0.1,
    ):
        super().__init__()
        blocks, c_in = [], in_channels
        for c_out in channels:
            conv = nn.Conv1d(c_in, c_out, kernel_size, padding=kernel_size // 2, bias=False)
            blocks += [conv, nn.BatchNorm1d(c_out), nn.ReLU(inplace=True), nn.MaxPool1d(2)]
            c_in = c_out
        self.features = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(c_in, num_classes)
        )

    @staticmethod
    def narrowed(net: dict, scale: float) -> dict:
        """compress=distill's default student: the same CNN with `scale` times the channels."""
        return {"channels": [max(2, round(c * scale)) for c in net.get("channels", (16, 32, 64))]}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class SignalClassifier(Classifier):
    kinds = (SignalClassification.name,)

    def __init__(self, net, optimizer, num_classes: PosInt, scheduler=None, **kwargs):
        self.num_classes = num_classes
        super().__init__(net, optimizer, scheduler, **kwargs)

    def make_metrics(self) -> MetricCollection:
        return MetricCollection(
            {
                "acc": MulticlassAccuracy(self.num_classes, average="micro"),
                "f1": MulticlassF1Score(self.num_classes, average="macro"),
            }
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log_step("train", loss, self.metric_preds(logits), y, len(y))
        return loss
