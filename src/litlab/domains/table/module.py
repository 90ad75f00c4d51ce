"""Regression: mean squared error on standardized targets (each target weighs the same,
whatever its units), metrics in the target's own units: mean absolute error, root mean squared
error and R^2 (the monitor)."""

import torch.nn.functional as F
from torchmetrics import MetricCollection
from torchmetrics.regression import MeanAbsoluteError, MeanSquaredError, R2Score

from litlab.models import LitModule
from litlab.tasks.regression import Regression


class Regressor(LitModule):
    kinds = (Regression.name,)
    metric_names = ("mae", "rmse", "r2")

    def __init__(self, net, optimizer, scheduler=None, monitor: str = "val/r2", **kwargs):
        super().__init__(net, optimizer, scheduler, monitor=monitor, **kwargs)

    def make_metrics(self) -> MetricCollection:
        return MetricCollection(
            {"mae": MeanAbsoluteError(), "rmse": MeanSquaredError(squared=False), "r2": R2Score()}
        )

    def _loss(self, x, y):
        """(the loss, the prediction in the target's units)."""
        out = self(x)
        return self.task_loss(out, y), out[:, 0]

    def task_loss(self, out, y):
        """MSE in standard units of the target: the net holds the training targets' spread."""
        scale = self.net.target_std[0]
        return F.mse_loss(out[:, 0] / scale, y / scale)

    def soft_loss(self, out, teacher_out):
        """compress=distill: the teacher's predictions are a second target (no temperature:
        values are not class scores)."""
        return self.task_loss(out, teacher_out[:, 0])

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss, pred = self._loss(x, y)
        self.log_step("train", loss, pred, y, len(y))
        return loss

    def eval_step(self, split: str, batch) -> None:
        x, y = batch
        loss, pred = self._loss(x, y)
        self.log_step(split, loss, pred, y, len(y))

    def predict_step(self, batch, batch_idx):
        x, y = batch
        pred = self(x)[:, 0]
        return {"target": y, "pred": pred, "residual": y - pred}
