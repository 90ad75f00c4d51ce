"""torchvision's ResNet-18, adapted to small images (CIFAR-style stem)."""

from typing import Literal

from torch import nn

from litlab.ops import with_linear_impl


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
    "net": {"_target_": "litlab.domains.vision.nets.cnn.SmallCNN", "channels": [32, 64, 128]},
    "optimizer": {
        "_target_": "torch.optim.AdamW",
        "_partial_": True,
        "lr": 0.005,
        "weight_decay": 0.0005,
    },
}
