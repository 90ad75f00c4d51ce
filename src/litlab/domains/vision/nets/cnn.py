"""A small CNN for small images: conv-BN-ReLU blocks, 2x2 max-pooling, a dropout head."""

from typing import Annotated, Literal

import torch
from torch import nn

from litlab.bounds import MinLen, PosInt, Probability
from litlab.ops import make_linear


def conv_block(c_in: int, c_out: int, pool: bool) -> nn.Sequential:
    layers = [
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    ]
    return nn.Sequential(*layers, nn.MaxPool2d(2)) if pool else nn.Sequential(*layers)


class SmallCNN(nn.Module):
    """`channels` sets one block per entry; pooling stops once the map is 2x2, so the same
    config fits 8x8 digits and 32x32 CIFAR. Global average pooling makes the head size-free.
    `linear_impl="tiled"` computes the head with litlab's custom op (litlab.ops, docs/ops.md);
    the parameters are the same either way."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int,
        channels: Annotated[list[PosInt], MinLen(1)] = (32, 64, 128),
        dropout: Probability = 0.3,
        xavier_init: bool = False,
        linear_impl: Literal["torch", "tiled"] = "torch",
    ):
        super().__init__()
        blocks, size, c_in = [], image_size, in_channels
        for c_out in channels:
            pool = size >= 4
            blocks.append(conv_block(c_in, c_out, pool))
            size, c_in = (size // 2 if pool else size), c_out
        self.features = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(dropout),
            make_linear(linear_impl, c_in, num_classes),
        )
        if xavier_init:
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

    @staticmethod
    def narrowed(net: dict, scale: float) -> dict:
        """compress=distill's default student: the same CNN with `scale` times the channels."""
        return {"channels": [max(2, round(c * scale)) for c in net.get("channels", (32, 64, 128))]}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
