"""How 2D segmentation items are read and named (the datamodules are in data.py): a NIfTI
volume windowed as training reads it, slices padded to the model's square and cropped back to
their source's size, the names of their masks, an image's group (`data.group`), and the files
of a mask folder (`data=masks`). An image's pixels are read as the service reads an upload
(serving/images.py): `convert("L")` would clip a 16-bit image at 255 and turn a float one into
0s and 1s; a mask holds class numbers, so it must be stored losslessly."""

import os
import re
from pathlib import Path

import numpy as np

from litlab.data import split_indices, volume_split
from litlab.errors import UserError


def pad_to(array: np.ndarray, size: int) -> np.ndarray:
    """Zero-pad the last two axes to size x size (centred); refuse larger."""
    h, w = array.shape[-2:]
    top, left = (size - h) // 2, (size - w) // 2
    pad = [(0, 0)] * (array.ndim - 2) + [(top, size - h - top), (left, size - w - left)]
    return np.pad(array, pad)


def crop_to(array: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The centred (height, width) `shape` of the last two axes: what `pad_to` padded."""
    size_h, size_w = array.shape[-2:]
    top, left = (size_h - shape[0]) // 2, (size_w - shape[1]) // 2
    return array[..., top : top + shape[0], left : left + shape[1]]


def window(volume: np.ndarray) -> np.ndarray:
    """A volume's intensities windowed to [0, 1] at its own 0.5th and 99.5th percentiles (over
    all its voxels, not per slice), clipped: how training reads NIfTI slices (docs/deploy.md's
    snippet writes a served PNG the same way)."""
    lo, hi = np.percentile(volume, (0.5, 99.5))
    return np.clip((volume - lo) / max(hi - lo, 1e-6), 0, 1)


def source_stem(name: str) -> str:
    """A source's name without its file type (.nii.gz too): what its masks are named after."""
    for suffix in (".nii.gz", ".nii"):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return Path(name).stem


def mask_names(name: str, slices: int, volume: bool) -> list[str]:
    """The PNG names of an item's predicted masks, one a slice: a volume's
    `<volume>_slice<k>.png`, an image's `<image stem>.png`."""
    stem = source_stem(name)
    return [f"{stem}_slice{k}.png" for k in range(slices)] if volume else [f"{stem}.png"]


#: what data.group takes, in its refusals
GROUP_VALID = (
    "a regex on the image file names whose first group (or whole match) names each image's "
    "group, e.g. '^(.*)_slice' for <volume>_slice<k>.png"
)


def image_groups(names: list[str], pattern: str | None, key: str) -> list[str] | None:
    """Each image's group: `pattern`'s first group (or its whole match) in the file name;
    None without a pattern. One line for a pattern that does not compile, misses an image,
    or makes fewer than 3 groups."""
    if pattern is None:
        return None
    try:
        regex = re.compile(str(pattern))
    except re.error as err:
        raise UserError(
            f"{key}.group={pattern!r} is not a regular expression ({err}); valid: {GROUP_VALID}"
        ) from None
    groups, missed = [], []
    for name in names:
        match = regex.search(name)
        found = None if match is None else match.group(1 if regex.groups else 0)
        missed += [name] if found is None else []
        groups.append(found)
    if len(missed) == len(names):
        raise UserError(
            f"{key}.group={pattern!r} matches none of the {len(names)} image names (e.g. "
            f"{names[0]}); valid: {GROUP_VALID}"
        )
    if missed:
        raise UserError(
            f"{key}.group={pattern!r} does not match {missed[0]} ({len(missed)} of "
            f"{len(names)} images): every image needs a group; valid: {GROUP_VALID}"
        )
    if len(set(groups)) < 3:
        named = ", ".join(repr(g) for g in dict.fromkeys(groups))
        count = "one group" if len(set(groups)) == 1 else "2 groups"
        raise UserError(
            f"{key}.group={pattern!r} puts the {len(names)} images in {count} ({named}); "
            f"train, val and test need at least 3; valid: {GROUP_VALID}"
        )
    return groups


def group_split(groups: list[str], label_maps, h) -> dict[str, list[int]]:
    """Images by split, their groups split whole (seeded), or folded by the datamodule's
    hparams `h`, stratified by the dominant structure of each group's label maps together."""
    order = list(dict.fromkeys(groups))  # the groups, by first image
    members = [[i for i, g in enumerate(groups) if g == name] for name in order]
    if h.num_folds is None:
        split = split_indices(len(order), h.val_fraction, h.test_fraction, h.seed, "groups")
    else:
        maps = [np.concatenate([np.asarray(label_maps[i]).reshape(-1) for i in m]) for m in members]
        split = volume_split(maps, h, "data.group's groups")
    return {k: sorted(i for g in v for i in members[g]) for k, v in split.items()}


# ---------------------------------------------------------- mask folders
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


def check_side(path, height: int, width: int, largest: int) -> None:
    """One line for an item larger than the `data.image_size` square it is padded to."""
    if max(height, width) > largest:
        raise UserError(
            f"{path}: {height}x{width} is larger than data.image_size={largest}; set "
            f"data.image_size={max(height, width)} or more"
        )


def _read(path: Path, read, largest: int | None):
    """`read(img)` of the image file at `path`; one line naming a file that is no readable
    image, or (`largest`) one with a side over it, told from the header before decoding."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            if largest is not None:
                check_side(path, img.size[1], img.size[0], largest)
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
