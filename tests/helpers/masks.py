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
