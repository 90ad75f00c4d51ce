"""MONAI's U-Net in 2D: image sides must divide by the product of the strides (8 for the
default); the datamodules pad slices and images to `image_size` squares (64)."""

import math
from typing import Annotated

from torch import nn

from litlab.bounds import MAX_IMAGE_SIDE, MinLen, NonNegInt, PosInt, Probability
from litlab.domains.medical3d.nets import monai_unet
from litlab.errors import UserError


def unet2d(
    in_channels: int,
    num_classes: int,
    channels: Annotated[list[PosInt], MinLen(2)] = (16, 32, 64, 128),
    strides: list[PosInt] = (2, 2, 2),
    num_res_units: NonNegInt = 1,
    norm: str = "batch",
    dropout: Probability = 0.0,
) -> nn.Module:
    return monai_unet(2, in_channels, num_classes, channels, strides, num_res_units, norm, dropout)


def _narrowed(net: dict, scale: float) -> dict:
    """compress=distill's default student: the same U-Net with `scale` times the channels."""
    return {"channels": [max(2, round(c * scale)) for c in net.get("channels", (16, 32, 64, 128))]}


def _check_dims(s: dict, dims: dict, key: str) -> None:
    """The padded image side must divide by the total stride, or the skip connections misalign
    at the first forward (torch's "Sizes of tensors must match")."""
    total, size = math.prod(s["strides"]), dims.get("image_size")
    if size is not None and size % total:
        fit = -(-size // total) * total  # the next multiple up: it still holds every image
        raise UserError(
            f"data.image_size={size} does not fit {key}.strides={list(s['strides'])}: it must "
            f"be a multiple of {total} (e.g. {fit}), at most {MAX_IMAGE_SIDE}"
        )


unet2d.narrowed, unet2d.check_dims = _narrowed, _check_dims
