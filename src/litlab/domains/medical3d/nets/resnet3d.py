"""MedicalNet-style 3D ResNet (Chen et al., 2019) from MONAI: basic blocks, shortcut type B,
no bias in the downsampling convs, so MedicalNet's pretrained weights fit when loaded."""

from typing import Literal

from torch import nn

from litlab.errors import UserError
from litlab.ops import with_linear_impl

DEPTHS = {10: [1, 1, 1, 1], 18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}


def resnet3d(
    in_channels: int,
    num_classes: int,
    depth: Literal[10, 18, 34] = 10,
    widen_factor: float = 1.0,
    conv1_size: int = 7,
    conv1_stride: int = 2,
    no_max_pool: bool = False,
    linear_impl: Literal["torch", "tiled"] = "torch",
) -> nn.Module:
    """A 3D ResNet-`depth` (10, 18 or 34). For small volumes (MedMNIST's 28^3) a 3x3x3 stem
    with stride 1 (`conv1_size=3 conv1_stride=1`) keeps more resolution. `linear_impl=tiled`:
    the classifier through litlab's custom op (docs/ops.md), same parameters."""
    from monai.networks.nets.resnet import ResNet, ResNetBlock

    if depth not in DEPTHS:
        raise UserError(f"model.net.depth={depth} is not valid; choose one of {sorted(DEPTHS)}")
    net = ResNet(
        ResNetBlock,
        DEPTHS[depth],
        [64, 128, 256, 512],
        spatial_dims=3,
        n_input_channels=in_channels,
        num_classes=num_classes,
        conv1_t_size=conv1_size,
        conv1_t_stride=conv1_stride,
        no_max_pool=no_max_pool,
        shortcut_type="B",
        bias_downsample=False,
        widen_factor=widen_factor,
    )
    net.fc = with_linear_impl(linear_impl, net.fc)
    return net


def _narrowed(net: dict, scale: float) -> dict:
    """compress=distill's default student: the same ResNet, `scale` times as wide."""
    return {"widen_factor": net.get("widen_factor", 1.0) * scale}


resnet3d.narrowed = _narrowed
