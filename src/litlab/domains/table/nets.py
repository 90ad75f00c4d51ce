"""The table domain's nets: plain nn.Modules built from config plus the datamodule's dims.

A small MLP for table rows, in the table's own units at both ends: it standardizes the
features and undoes the targets' standardization itself (statistics of the training rows, stored
as buffers), so an exported file takes raw rows and answers values a person can read."""

import itertools

import torch
from torch import nn

from litlab.bounds import PosInt, Probability


class TableMLP(nn.Module):
    def __init__(
        self,
        in_features: PosInt,
        feature_mean: list[float],
        feature_std: list[float],
        target_mean: list[float],
        target_std: list[float],
        hidden: PosInt = 64,
        layers: PosInt = 2,
        dropout: Probability = 0.1,
    ):
        super().__init__()
        width = [in_features] + [hidden] * layers
        blocks = []
        for a, b in itertools.pairwise(width):
            blocks += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)]
        self.body = nn.Sequential(*blocks, nn.Linear(width[-1], len(target_mean)))
        for name, values in (
            ("feature_mean", feature_mean),
            ("feature_std", feature_std),
            ("target_mean", target_mean),
            ("target_std", target_std),
        ):
            self.register_buffer(name, torch.tensor(values, dtype=torch.float32))

    @staticmethod
    def narrowed(net: dict, scale: float) -> dict:
        """compress=distill's default student: the same MLP, `scale` times as wide."""
        return {"hidden": max(2, round(net.get("hidden", 64) * scale))}

    def standardized(self, x: torch.Tensor) -> torch.Tensor:
        """The prediction in standard units of the target (what the loss compares)."""
        return self.body((x - self.feature_mean) / self.feature_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.standardized(x) * self.target_std + self.target_mean
