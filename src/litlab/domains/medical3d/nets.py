"""The medical3d domain's nets, from MONAI: a MedicalNet-style 3D ResNet (Chen et al., 2019:
basic blocks, shortcut type B, no bias in the downsampling convs, so MedicalNet's pretrained
weights fit when loaded) and a 3D U-Net (residual units, instance norm)."""

import math
from typing import Annotated, Literal

from torch import nn

from litlab.bounds import MinLen, NonNegInt, PosInt, Probability
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


def _resnet3d_narrowed(net: dict, scale: float) -> dict:
    """compress=distill's default student: the same ResNet, `scale` times as wide."""
    return {"widen_factor": net.get("widen_factor", 1.0) * scale}


resnet3d.narrowed = _resnet3d_narrowed


# ------------------------------------------------------------------ unet
def unet3d(
    in_channels: int,
    num_classes: int,
    channels: Annotated[list[PosInt], MinLen(2)] = (16, 32, 64, 128),
    strides: list[PosInt] = (2, 2, 2),
    num_res_units: NonNegInt = 2,
    norm: str = "instance",
    dropout: Probability = 0.0,
) -> nn.Module:
    """`channels` has one entry per level and `strides` one fewer: patch sides must divide by
    the product of the strides (8 for the default)."""
    return monai_unet(3, in_channels, num_classes, channels, strides, num_res_units, norm, dropout)


def monai_unet(
    spatial_dims, in_channels, num_classes, channels, strides, num_res_units, norm, dropout
) -> nn.Module:
    """MONAI's U-Net, 2D or 3D (litlab.domains.segmentation2d.nets shares it)."""
    from monai.networks.nets import UNet

    return UNet(
        spatial_dims=spatial_dims,
        in_channels=in_channels,
        out_channels=num_classes,
        channels=tuple(channels),
        strides=tuple(strides),
        num_res_units=num_res_units,
        norm=norm,
        dropout=dropout,
    )


def _check_settings(s: dict, key: str) -> None:
    if len(s["strides"]) != len(s["channels"]) - 1:
        raise UserError(
            f"{key}.strides={list(s['strides'])} needs one entry fewer than "
            f"{key}.channels={list(s['channels'])}"
        )


def _check_dims(s: dict, dims: dict, key: str) -> None:
    """Each patch side must divide by the total stride, or the skip connections misalign."""
    total = math.prod(s["strides"])
    patch = list(dims.get("patch_size") or [])
    if any(p % total for p in patch):
        raise UserError(
            f"data.patch_size={patch} does not fit {key}.strides={list(s['strides'])}: "
            f"each side must be a multiple of {total} (e.g. "
            f"{[max(total, round(p / total) * total) for p in patch]})"
        )


def _unet3d_narrowed(net: dict, scale: float) -> dict:
    """compress=distill's default student: the same U-Net with `scale` times the channels."""
    return {"channels": [max(2, round(c * scale)) for c in net.get("channels", (16, 32, 64, 128))]}


unet3d.check_settings, unet3d.check_dims = _check_settings, _check_dims
unet3d.narrowed = _unet3d_narrowed
