"""MONAI's 3D U-Net (residual units, instance norm), sized by the datamodule."""

from typing import Annotated

from torch import nn

from litlab.bounds import MinLen, NonNegInt, PosInt, Probability
from litlab.errors import UserError


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
    """MONAI's U-Net, 2D or 3D (litlab.domains.segmentation2d.nets.unet2d shares it)."""
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
    import math

    total = math.prod(s["strides"])
    patch = list(dims.get("patch_size") or [])
    if any(p % total for p in patch):
        raise UserError(
            f"data.patch_size={patch} does not fit {key}.strides={list(s['strides'])}: "
            f"each side must be a multiple of {total} (e.g. "
            f"{[max(total, round(p / total) * total) for p in patch]})"
        )


def _narrowed(net: dict, scale: float) -> dict:
    """compress=distill's default student: the same U-Net with `scale` times the channels."""
    return {"channels": [max(2, round(c * scale)) for c in net.get("channels", (16, 32, 64, 128))]}


unet3d.check_settings, unet3d.check_dims = _check_settings, _check_dims
unet3d.narrowed = _narrowed
