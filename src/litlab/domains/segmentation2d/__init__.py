"""2D segmentation: axial slices of the Hippocampus volumes (split by volume) and a
user's images/ + masks/ folders; a 2D U-Net, Dice per whole item."""

from litlab.domains import Domain, Template

DOMAIN = Domain(
    datamodules=("data.Hippocampus2DDataModule", "data.MaskFolderDataModule"),
    modules=("module.ImageSegmenter",),
    nets=("nets.unet2d",),
    # its data is the Hippocampus volumes (or a mask folder): a copy trains on them
    template=Template(
        "data.Hippocampus2DDataModule",
        "nets.unet2d",
        "hippocampus2d",
        "unet2d",
        "test/dice",
        0.3,
        3,
    ),
)
