"""A mask folder (`data=masks`) written by tests: a learnable 2D segmentation task."""

import numpy as np
from PIL import Image


def mask_folder(root, count: int = 24, size: int = 32, seed: int = 0):
    """Grey images with a bright square (label 1) and a dim disc (label 2) on noise."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    yy, xx = np.mgrid[:size, :size]
    for i in range(count):
        label = np.zeros((size, size), np.uint8)
        top, left = rng.integers(2, size // 2, 2)
        label[top : top + 8, left : left + 8] = 1
        cy, cx = rng.integers(6, size - 6, 2)
        label[((yy - cy) ** 2 + (xx - cx) ** 2 < 16) & (label == 0)] = 2
        image = 40 + 20 * rng.random((size, size)) + 150 * (label == 1) + 70 * (label == 2)
        Image.fromarray(image.astype(np.uint8)).save(root / "images" / f"{i:03d}.png")
        Image.fromarray(label).save(root / "masks" / f"{i:03d}.png")
    return root


def nifti_folder(root, count: int = 5, depth: int = 3, seed: int = 0):
    """An MSD folder (images/ + labels/) of `count` small volumes v<i>.nii.gz, 12x10 slices
    along the last axis (`depth`, or depth + 1 for odd i), labels 0..2, one bright voxel in the
    middle slice (windowing at the volume's percentiles and at the slice's extremes differ)."""
    import nibabel as nib

    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for i in range(count):
        label = np.zeros((12, 10, depth + i % 2), np.uint8)
        label[3:7, 2:6] = 1 + i % 2
        label[8:10, 6:9] = 2 - i % 2
        image = 100 + 50 * label + rng.normal(0, 5, label.shape)
        image[0, 0, label.shape[-1] // 2] = 2000  # above the 99.5th percentile
        affine = np.eye(4)
        nib.save(
            nib.Nifti1Image(image.astype(np.float32), affine), root / "images" / f"v{i}.nii.gz"
        )
        nib.save(nib.Nifti1Image(label, affine), root / "labels" / f"v{i}.nii.gz")
    return root
