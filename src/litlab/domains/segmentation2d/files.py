"""The files of a mask folder (`data=masks`): which mask is an image's, and what each file must
hold, read so that nothing is lost after the check.

An image's pixels are read as the service reads an upload (serving/images.py): 8-bit / 255,
16-bit / 65535, a float TIFF as it is (it must lie in [0, 1]); `convert("L")` would clip a
16-bit image at 255 and turn a float one into 0s and 1s. A mask holds class numbers, so it must
be stored losslessly: a JPEG changes values along every edge (a mask of 0 and 1 comes back with
2s and 254s), and a float mask must hold whole numbers (0.5 would be truncated to class 0).
"""

import os
from pathlib import Path

import numpy as np

from litlab.errors import UserError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
#: an image's mask is `masks/<its name>`, else `masks/<its stem><one of these>` (a photo's
#: mask is a PNG beside a JPEG)
MASK_SUFFIXES = (".png", ".tif", ".tiff", ".bmp", ".gif")
#: formats (Pillow's names) and TIFF compressions that change pixel values
LOSSY_FORMATS, LOSSY_TIFF = ("JPEG", "MPO", "WEBP"), ("jpeg", "tiff_jpeg", "webp")


def mask_of(image: Path, masks: Path) -> Path | None:
    """The mask file of `image` in the folder `masks` (a link or a pipe counts: the caller
    checks what it is), or None."""
    for candidate in (masks / image.name, *(masks / f"{image.stem}{s}" for s in MASK_SUFFIXES)):
        if os.path.lexists(candidate):
            return candidate
    return None


def _read(path: Path, read, largest: int | None):
    """`read(img)` of the image file at `path`; one line naming a file that is no readable
    image, or (`largest`) one with a side over it, told from the header before decoding."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            if largest is not None and max(img.size) > largest:
                width, height = img.size
                raise UserError(
                    f"{path}: {height}x{width} is larger than data.image_size={largest}; set "
                    f"data.image_size={max(img.size)} or more"
                )
            frames = getattr(img, "n_frames", 1)
            if frames != 1:  # an animated GIF, a multi-page TIFF: only the first would be read
                raise UserError(
                    f"{path} holds {frames} frames (pages); an image or mask file holds one 2D "
                    "picture: save each frame as its own file"
                )
            return read(img)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 (Pillow raises many types on a bad file)
        raise UserError(f"{path} is not a readable image ({type(err).__name__})") from None


def grey(path: Path, largest: int | None = None) -> np.ndarray:
    """An image's pixels, (H, W) float32 in [0, 1] (colour to grey by ITU-R 601 luma)."""

    def read(img):
        if img.mode == "F":
            pixels = np.asarray(img, dtype=np.float32)
            if not (np.isfinite(pixels).all() and 0 <= pixels.min() <= pixels.max() <= 1):
                raise UserError(
                    f"{path} is a float image with values outside [0, 1] (or NaN); a float "
                    "image holds intensities in [0, 1] (8- and 16-bit images are scaled)"
                )
            return pixels
        if img.mode.startswith("I"):  # 16-bit (I;16*), or 32-bit integers as the service does
            lo, hi = img.getextrema()
            full = 65535.0 if img.mode != "I" or (lo >= 0 and hi <= 65535) else 2**31 - 1.0
            return np.asarray(img.convert("I"), dtype=np.float32) / full
        return np.asarray(img.convert("L"), dtype=np.float32) / 255.0

    return _read(path, read, largest)


def labels(path: Path) -> np.ndarray:
    """A mask's values as stored (8-, 16-bit, float, palette indices, 1-bit as 0/1); one line
    for a lossy file. Its values are checked by `nifti.check_label_map`."""

    def read(img):
        compression = str(img.info.get("compression", "")).lower()
        if img.format in LOSSY_FORMATS or (img.format == "TIFF" and compression in LOSSY_TIFF):
            what = f"a {img.format} file" if img.format != "TIFF" else "a JPEG-compressed TIFF"
            raise UserError(
                f"{path} is {what}: lossy compression changes label values along every edge; "
                "save masks losslessly (PNG, BMP, or TIFF without JPEG compression)"
            )
        array = np.asarray(img)
        return array.astype(np.uint8) if array.dtype == bool else array

    return _read(path, read, None)
