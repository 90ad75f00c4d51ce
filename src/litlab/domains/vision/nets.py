"""The vision domain's nets: a small CNN, and torchvision's ResNet-18 adapted to small
images."""

from typing import Annotated, Literal

import torch
from torch import nn

from litlab.bounds import MinLen, PosInt, Probability
from litlab.ops import make_linear, with_linear_impl


class SmallCNN(nn.Module):
    """Conv-BN-ReLU blocks, 2x2 max-pooling, a dropout head. `channels` sets one block per
    entry; pooling stops once the map is 2x2, so the same
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
            pool = [nn.MaxPool2d(2)] if size >= 4 else []
            conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
            blocks.append(nn.Sequential(conv, nn.BatchNorm2d(c_out), nn.ReLU(inplace=True), *pool))
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


# ---------------------------------------------------------------- resnet
def resnet18(
    in_channels: int,
    num_classes: int,
    image_size: int,
    small_input: bool | None = None,
    zero_init_residual: bool = True,
    linear_impl: Literal["torch", "tiled"] = "torch",
) -> nn.Module:
    """ResNet-18 from torchvision (random init: no weights are downloaded).

    For images under 64 px (`small_input`, default by size) the 7x7/2 stem and max-pool are
    replaced by a 3x3/1 conv, as in the CIFAR ResNets, so 32x32 inputs keep their resolution.
    `linear_impl=tiled`: the classifier through litlab's custom op (docs/ops.md).
    """
    from torchvision.models import resnet18 as tv_resnet18

    net = tv_resnet18(weights=None, num_classes=num_classes, zero_init_residual=zero_init_residual)
    small = image_size < 64 if small_input is None else small_input
    if small:
        net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    net.fc = with_linear_impl(linear_impl, net.fc)
    return net


#: compress=distill's default student: ResNet-18 has no width knob, so a smaller net of another
#: family (the small CNN of configs/model/cnn.yaml) with the optimizer that trains it
resnet18.student = {
    "net": {"_target_": "litlab.domains.vision.nets.SmallCNN", "channels": [32, 64, 128]},
    "optimizer": {
        "_target_": "torch.optim.AdamW",
        "_partial_": True,
        "lr": 0.005,
        "weight_decay": 0.0005,
    },
}
