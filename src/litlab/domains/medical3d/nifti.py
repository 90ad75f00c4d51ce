"""NIfTI folders and files of the 3D (and 2D slices) datamodules: the image/label pairs of an MSD
layout, reading and writing volumes (as volumes.py holds them), the preprocessed cache keyed by
the files and settings, and the service's NIfTI uploads and answers (`read_upload`,
`nifti_bytes`)."""

import gzip
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from litlab.bounds import MAX_SEGMENT_CLASSES
from litlab.errors import UserError, one_line
from litlab.utils.files import check_regular

NIFTI_SUFFIXES = (".nii.gz", ".nii")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in NIFTI_SUFFIXES:
        name = name.removesuffix(suffix)
    return name.removesuffix("_0000")  # nnU-Net names the first channel *_0000


def folder_pairs(settings: dict, key: str, check_folds) -> list[tuple[Path, Path]]:
    """The image/label pairs of the NIfTI folder `settings["root"]`, read before anything is
    printed: one line if it is no folder, or holds too few pairs for the settings' folds
    (`check_folds(settings, key, count)`, the datamodule's). The 3D and the 2D (slices)
    datamodules of a NIfTI folder both check it so."""
    root = Path(str(settings["root"]))
    if not root.is_dir():
        raise UserError(
            f"{key}.root={root} is not a folder (expected imagesTr/ and labelsTr/, or images/ "
            f"and labels/); copy the dataset there, or pass {key}.root=FOLDER, or (where "
            f"{key}.root is ${{paths.data_dir}}/{root.name}, as in the recipes) "
            f"paths.data_dir=FOLDER (or set LITLAB_DATA_DIR) for the folder that holds "
            f"{root.name}/"
        )
    pairs = find_pairs(root, key)
    check_folds(settings, key, len(pairs))
    label_names(root, int(settings.get("num_classes", 3)), key)  # a dataset.json names them
    return pairs


def find_pairs(root: Path, key: str = "data") -> list[tuple[Path, Path]]:
    """(image, label) pairs in MSD layout: imagesTr/+labelsTr/ or images/+labels/. An image
    without its label is refused, naming it: a training folder holds labelled images only (MSD
    keeps the unlabelled ones in imagesTs/); so is one that is no regular file."""
    for images, labels in (("imagesTr", "labelsTr"), ("images", "labels")):
        if (root / images).is_dir() and (root / labels).is_dir():
            break
    else:
        raise UserError(f"{key}.root={root} has no imagesTr/+labelsTr/ or images/+labels/ folders")
    volumes, labelled = (
        sorted(
            p
            for p in (root / folder).iterdir()
            if p.name.endswith(NIFTI_SUFFIXES) and not p.name.startswith(".")
        )
        for folder in (images, labels)
    )
    found = {_stem(p): p for p in labelled}
    unlabelled = [p.name for p in volumes if _stem(p) not in found]
    if unlabelled:
        raise UserError(
            f"{key}.root={root}: {images}/{unlabelled[0]} has no label in {labels}/ "
            f"({len(unlabelled)} of {len(volumes)} images have none); add its label, or move "
            "unlabelled images out of the training folder (MSD keeps them in imagesTs/)"
        )
    pairs = [(p, found[_stem(p)]) for p in volumes]
    for pair in pairs:  # a pipe would block the reader forever, a device never end
        for path, folder in zip(pair, (images, labels), strict=True):
            check_regular(path, f"{key}.root={root}: {folder}/{path.name}", "a NIfTI file")
    if len(pairs) < 3:
        raise UserError(
            f"{key}.root={root}: found {len(pairs)} image/label pairs with matching "
            f"names in {images}/ and {labels}/ ({len(volumes)} NIfTI images), need "
            f"at least 3 (train, val, test)"
        )
    return pairs


def label_names(root, num_classes: int, key: str = "data") -> list[str] | None:
    """The class names of an MSD folder's dataset.json `labels` ({"0": "background", "1":
    "Anterior", ...}, or nnU-Net v2's {"background": 0, ...}): what an exported model names
    its classes by (the service answers them). None without a dataset.json or its `labels`;
    one line when they do not name exactly the classes 0..num_classes-1 in short printable
    words (a file from elsewhere is data: its names end up in every answer)."""
    path = Path(str(root)) / "dataset.json"
    if not path.is_file():
        return None
    valid = f"valid: a name for each label 0 to {num_classes - 1} ({key}.num_classes={num_classes})"
    try:
        labels = json.loads(path.read_text()).get("labels")
    except (ValueError, UnicodeDecodeError, AttributeError, RecursionError) as err:
        raise UserError(f"{path} is not a JSON object ({one_line(err)}); {valid}") from None
    if labels is None:
        return None
    pairs = labels.items() if isinstance(labels, dict) else []
    flipped = all(isinstance(v, int) and not isinstance(v, bool) for _, v in pairs)
    names = {str(v): k for k, v in pairs} if flipped else {str(k): v for k, v in pairs}
    wanted = [str(i) for i in range(num_classes)]
    if sorted(names) != sorted(wanted) or not all(
        isinstance(n, str) and 0 < len(n) <= 64 and n.isprintable() for n in names.values()
    ):
        raise UserError(
            f"{path}: its labels {one_line(json.dumps(labels))[:200]} do not fit; {valid}"
        )
    return [names[i] for i in wanted]


def case_id(name: str) -> str:
    """A volume's name without .nii.gz: predictions.csv's `case`, masks/<case>.nii.gz."""
    return name.removesuffix(".gz").removesuffix(".nii")


def read_nifti(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(array (C, D, H, W), affine); a 4D NIfTI (x, y, z, c) becomes c channels."""
    import nibabel as nib

    try:
        img = nib.load(str(path))
        data = np.asarray(img.dataobj, dtype=np.float32)
    except Exception as err:  # truncated gzip, not a NIfTI file, ...
        raise UserError(f"cannot read NIfTI {path}: {one_line(err)}") from err
    if data.ndim == 3:
        data = data[None]
    elif data.ndim == 4:
        data = np.moveaxis(data, -1, 0)
    return np.ascontiguousarray(data), img.affine.astype(np.float64)


def header_shape(path: Path) -> tuple[int, ...]:
    """A NIfTI file's array shape (x, y, z[, c]) from its header, no voxel read."""
    import nibabel as nib

    try:
        return tuple(int(n) for n in nib.load(str(path)).shape)
    except Exception as err:  # truncated gzip, not a NIfTI file, ...
        raise UserError(f"cannot read NIfTI {path}: {one_line(err)}") from err


def check_pair(image_path, label_path, image: np.ndarray, label: np.ndarray, num_classes: int):
    """An image (C, *spatial) of finite values and its label map (*spatial: one channel, the
    image's shape, whole numbers 0..num_classes-1), or one line naming the file at fault: a
    label the loss cannot take fails here, before training, not as an index error in a step."""
    if not np.isfinite(image).all():
        raise UserError(f"{image_path} holds nan or inf values; an image is finite numbers")
    if tuple(label.shape) != tuple(image.shape[1:]):
        raise UserError(
            f"{label_path} has shape {list(label.shape)}, its image {list(image.shape[1:])}: "
            "a label map is one label per voxel of its image (one channel)"
        )
    check_label_map(label_path, label, num_classes)


def check_label_map(path, label: np.ndarray, num_classes: int) -> None:
    """A label map (any dtype: NIfTI stores floats, a mask file may be 16-bit or float) of whole
    numbers 0..num_classes-1, or one line naming the file and a value that is not: a label the
    loss cannot take fails here, not as an index error in a step, and a fraction (0.5) or a NaN
    is never truncated to a class."""
    if label.dtype == bool:
        return  # 0 and 1: a binary mask
    # min and max first (one pass each, no sort: a CT volume has 10^8 voxels), then whole numbers
    low, high = float(label.min()), float(label.max())
    fractional = label != np.round(label)  # nan is no whole number either
    bad = low if low < 0 else high if high >= num_classes else None
    if bad is None and fractional.any():
        bad = float(label[fractional].flat[0])
    if bad is None:
        return
    whole = bad == high and bad == round(bad) and not fractional.any()
    hint = ""
    if whole and high < MAX_SEGMENT_CLASSES:  # more classes than the settings say?
        hint = f": set data.num_classes={int(high) + 1} if they are classes"
    elif whole:  # 255 or 65535: a picture's white, not a class number
        hint = f": a label map holds class numbers, not grey levels (store {high:g} as a class)"
    raise UserError(
        f"{path} holds label {bad:g}; labels are whole numbers 0 to {num_classes - 1} "
        f"(data.num_classes={num_classes}, background included){hint}"
    )


def write_mask(mask: np.ndarray, path: Path, affine: np.ndarray, like: Path | None = None) -> None:
    """Write a label volume (D, H, W) as NIfTI with the input's affine and, when the input file
    is known, its header (spacing, orientation codes, description)."""
    import nibabel as nib

    header = nib.load(str(like)).header.copy() if like and Path(like).is_file() else None
    image = nib.Nifti1Image(mask.astype(np.uint8), affine, header=header)
    image.set_data_dtype(np.uint8)
    image.header.set_slope_inter(1, 0)
    tmp = path.with_name(path.name + ".tmp.nii.gz")
    nib.save(image, str(tmp))
    os.replace(tmp, path)  # never a half-written mask


def cache_key(files: list[Path], **params) -> str:
    """Changes when any file (name, size, mtime) or preprocessing parameter changes."""
    h = hashlib.sha1(repr(sorted(params.items())).encode())
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def save_cache(path: Path, volumes: list[dict]) -> None:
    """One .npz of arrays (no pickles), written atomically: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"{k}_{i}": v[k] for i, v in enumerate(volumes) for k in ("image", "label", "affine")}
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load_cache(path: Path, files: list[Path]) -> list[dict]:
    with np.load(path) as z:
        return [
            {
                "image": z[f"image_{i}"],
                "label": z[f"label_{i}"],
                "affine": z[f"affine_{i}"],
                "path": str(f),
                "name": f.name,
            }
            for i, f in enumerate(files)
        ]


# ----------------------------------------------------------------------------- preprocessing


def nifti_voxels(raw: bytes) -> int:
    """Voxels the NIfTI header claims, read from the first bytes only (a gzip bomb is never
    inflated past its header); 0 when there is no readable header."""
    import nibabel as nib

    try:
        head = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(540) if raw[:2] == b"\x1f\x8b" else raw
        nifti2 = head[4:7] in (b"n+2", b"ni2")
        if not (nifti2 or head[344:347] in (b"n+1", b"ni1")):
            return 0  # no NIfTI magic: not a NIfTI header
        kind = nib.Nifti2Header if nifti2 else nib.Nifti1Header
        header = kind.from_fileobj(io.BytesIO(head[: kind.sizeof_hdr]), check=False)
        shape = header.get_data_shape()
    except Exception:  # noqa: BLE001 (not NIfTI: the reader below says so)
        return 0
    return int(np.prod(shape, dtype=np.float64))


def read_upload(
    raw: bytes, filename: str, channels: int, max_voxels: int = 1 << 25
) -> tuple[np.ndarray, np.ndarray]:
    """A NIfTI upload to the service as (volume (C, D, H, W) z-scored per channel as in
    training, affine); its size is checked from the header before the voxels are read;
    anything wrong is the request's `BadRequest`."""
    from litlab.domains.medical3d.volumes import normalize
    from litlab.tasks.checks import BadRequest

    if not raw:
        raise BadRequest("The uploaded NIfTI file is empty.")
    if (voxels := nifti_voxels(raw)) > max_voxels:
        raise BadRequest(
            f"The volume's header claims {voxels:,} voxels; the limit is {max_voxels:,} "
            "(serve setting max_volume_voxels).",
            413,
        )
    suffix = ".nii.gz" if raw[:2] == b"\x1f\x8b" else ".nii"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"upload{suffix}"
        path.write_bytes(raw)
        try:
            volume, affine = read_nifti(path)
        except (UserError, Exception):  # noqa: BLE001 (nibabel raises many types)
            raise BadRequest(
                f"The upload {filename!r} is not a readable NIfTI volume "
                "(truncated or another format).",
                400,
            ) from None
    if volume.shape[0] != channels or min(volume.shape[1:]) < 1:
        raise BadRequest(
            f"The volume has {volume.shape[0]} channel(s); the model takes {channels}.", 422
        )
    if not np.isfinite(volume).all():
        raise BadRequest("The volume holds NaN or infinite values.", 422)
    with np.errstate(all="ignore"):
        volume = normalize(volume)
    if not np.isfinite(volume).all():  # values so large that their z-score overflows
        raise BadRequest("The volume's values are too large to normalize (not finite).", 422)
    return volume, affine


def nifti_bytes(mask: np.ndarray, affine: np.ndarray) -> bytes:
    import nibabel as nib

    image = nib.Nifti1Image(mask.astype(np.uint8), affine)
    image.set_data_dtype(np.uint8)
    return gzip.compress(image.to_bytes(), compresslevel=1)
