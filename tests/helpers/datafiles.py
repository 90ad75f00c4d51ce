"""Small raw data files in the formats the datamodules read (MNIST idx, image folders,
MedMNIST npz), written by the tests that need them."""

import gzip
from pathlib import Path

import numpy as np


def write_idx(path, array: np.ndarray) -> None:
    """An MNIST-format idx file (gzip), as the original distribution files are."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_images(root, splits: list[str], classes=("cat", "dog", "fox"), n: int = 8) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in splits:
        for cls in classes:
            folder = root / split / cls
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(
                    folder / f"{i}.png"
                )


def write_medmnist_npz(path: Path, size: int = 28) -> None:
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 12), ("val", 4), ("test", 6)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, size, size, size), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 2, (n, 1)).astype(np.uint8)
    np.savez_compressed(path, **arrays)
