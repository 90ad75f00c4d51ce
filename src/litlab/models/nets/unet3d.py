"""MONAI's 3D U-Net (residual units, instance norm), sized by the datamodule."""
from torch import nn


def unet3d(in_channels: int, num_classes: int, channels=(16, 32, 64, 128),
           strides=(2, 2, 2), num_res_units: int = 2, norm: str = "instance",
           dropout: float = 0.0) -> nn.Module:
    """`channels` has one entry per level and `strides` one fewer: patch sides must divide by
    the product of the strides (8 for the default)."""
    from monai.networks.nets import UNet

    return UNet(spatial_dims=3, in_channels=in_channels, out_channels=num_classes,
                channels=tuple(channels), strides=tuple(strides), num_res_units=num_res_units,
                norm=norm, dropout=dropout)
