"""3D volumes: phantoms, MedMNIST 3D, the MSD Hippocampus NIfTI files and a user's NIfTI
folders; classification (ResNet3D) and segmentation (UNet3D, patches and sliding windows)."""

from litlab.domains import Domain, Template

DOMAIN = Domain(
    datamodules=(
        "data.PhantomSegmentationDataModule",
        "data.NiftiDataModule",
        "data.PhantomClassificationDataModule",
        "data.MedMNIST3DDataModule",
    ),
    modules=("module.VolumeSegmenter", "module.VolumeClassifier"),
    nets=("nets.unet3d", "nets.resnet3d"),
    template=Template(
        "data.PhantomSegmentationDataModule",
        "nets.unet3d",
        "phantom_seg",
        "unet3d",
        "test/dice",
        0.3,
        3,
    ),
)
