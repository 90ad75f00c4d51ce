"""Building blocks of the 3D medical datamodules: generated phantoms, the patch and whole-volume
datasets (DDP eval shards are unpadded by litlab.utils.distributed); NIfTI files and their
caches are litlab.domains.medical3d.nifti's.

Volumes are held as numpy arrays `image (C, D, H, W) float32` and `label (1, D, H, W) uint8`.
MONAI is imported inside the functions that use it (its import costs seconds).
"""

import logging
import math
import os

import numpy as np
import torch
from torch.utils.data import Dataset

from litlab.data import check_fits
from litlab.errors import UserError

log = logging.getLogger(__name__)
#: a nodule's radius is drawn from this range (voxels)
NODULE_RADIUS = (2.0, 3.5)


# ----------------------------------------------------------------------------- phantoms
def phantom(
    seed: int,
    index: int,
    shape,
    nodule_probability: float = 1.0,
    noise: float = 0.1,
    nodule_radius=NODULE_RADIUS,
) -> tuple[np.ndarray, np.ndarray, int]:
    """One synthetic volume: a rotated ellipsoid "organ" (label 1) and, with probability
    `nodule_probability`, a bright sphere "nodule" (label 2), on a smooth intensity gradient
    with Gaussian noise. Same (seed, index, shape) gives the same volume. Returns
    (image (1, D, H, W), label (1, D, H, W), has_nodule)."""
    rng = np.random.default_rng([seed, index])
    shape = np.asarray(shape)
    grid = np.stack(
        np.meshgrid(*[np.arange(s, dtype=np.float32) for s in shape], indexing="ij"), -1
    )
    rotation, center, axes, slope, brightness = _organ_draws(rng)
    organ = ((((grid - shape * center) @ rotation) / (shape * axes)) ** 2).sum(-1) <= 1.0
    label = organ.astype(np.uint8)
    gradient = ((grid / shape - 0.5) @ slope).astype(np.float32)
    image = 0.2 + gradient + organ * brightness
    has_nodule = bool(rng.random() < nodule_probability)
    if has_nodule:
        radius = rng.uniform(*nodule_radius)
        at = rng.uniform(radius + 1, shape - radius - 1)
        blob = ((grid - at) ** 2).sum(-1) <= radius**2
        label[blob] = 2
        image = np.where(blob, rng.uniform(1.0, 1.3), image)
    image = image + rng.normal(0.0, noise, image.shape)
    return image[None].astype(np.float32), label[None], int(has_nodule)


def _organ_draws(rng: np.random.Generator) -> tuple:
    """The organ's random draws, in the order phantom() has always made them (rotation, centre
    and semi-axes as fractions of the shape, intensity slope, brightness): one place, so that
    `phantom_has_nodule` replays them without building a volume."""
    rotation, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    center, axes = rng.uniform(0.4, 0.6, 3), rng.uniform(0.18, 0.3, 3)
    return rotation, center, axes, rng.uniform(-0.2, 0.2, 3), rng.uniform(0.45, 0.7)


def phantom_has_nodule(seed: int, index: int, nodule_probability: float) -> int:
    """phantom()'s `has_nodule` alone, in microseconds: the labels k-fold checks before any
    volume is generated."""
    rng = np.random.default_rng([seed, index])
    _organ_draws(rng)
    return int(rng.random() < nodule_probability)


def phantom_shapes(seed: int, count: int, size: int, jitter: int) -> list[tuple[int, int, int]]:
    """Per-volume shapes `size ± jitter` (real data varies in size too)."""
    rng = np.random.default_rng([seed, 10**6])
    return [
        tuple(int(s) for s in rng.integers(size - jitter, size + jitter + 1, 3))
        for _ in range(count)
    ]


def check_phantoms(settings: dict, key: str) -> None:
    """Every phantom holds its nodule (sides of at least 2 radii + 2 voxels: `phantom` draws its
    centre inside), and all of them fit in memory (they are generated and held), before
    anything is written."""
    size, jitter = int(settings.get("size", 32)), int(settings.get("size_jitter", 4))
    count = int(settings.get("num_volumes", 48))
    radius = max(settings.get("nodule_radius") or NODULE_RADIUS)
    need = math.ceil(2 * radius + 2)
    if size - jitter < need:
        raise UserError(
            f"{key}.size={size} with {key}.size_jitter={jitter} makes phantoms with sides of "
            f"{size - jitter} voxels; a nodule of radius {radius:g} needs at least {need}: "
            f"raise {key}.size or lower {key}.size_jitter"
        )
    check_fits(
        count * (size + jitter) ** 3 * 5,  # a float32 image and an 8-bit label per voxel
        f"{key}.num_volumes={count} phantoms of up to {size + jitter}^3 voxels",
        f"lower {key}.size or {key}.num_volumes",
    )


def normalize(image: np.ndarray) -> np.ndarray:
    """Per-volume, per-channel z-score (nnU-Net's scheme for MRI)."""
    from monai.transforms import NormalizeIntensity

    return np.asarray(NormalizeIntensity(channel_wise=True)(image), dtype=np.float32)


def prepare_for_patches(volume: dict, patch_size) -> dict:
    """Pad to at least the patch size and precompute foreground/background voxel indices, once,
    so that balanced patch sampling costs no scan of the label per item."""
    from monai.transforms import FgBgToIndices, SpatialPad

    pad = SpatialPad(patch_size, mode="constant")
    image = np.asarray(pad(volume["image"]), dtype=np.float32)
    label = np.asarray(pad(volume["label"]), dtype=np.uint8)
    fg, bg = FgBgToIndices()(label)
    return {"image": image, "label": label, "fg": np.asarray(fg), "bg": np.asarray(bg)}


def patch_transform(patch_size, augment: bool, spatial_augment: bool = False):
    """Random patch, half centred on foreground, then flips and intensity scale/shift; with
    `spatial_augment`, also nnU-Net's heavier draws: rotation (up to 30 degrees about each
    axis) and scaling (0.7-1.4) of the patch, gamma, Gaussian noise and blur."""
    import monai.transforms as T

    keys, spatial = ["image", "label"], augment and spatial_augment
    steps = [
        T.RandCropByPosNegLabeld(
            keys,
            "label",
            patch_size,
            pos=1,
            neg=1,
            num_samples=1,
            fg_indices_key="fg",
            bg_indices_key="bg",
        )
    ]
    if spatial:
        steps.append(
            T.RandAffined(
                keys,
                prob=0.3,
                rotate_range=(np.pi / 6,) * 3,
                scale_range=((-0.3, 0.4),) * 3,  # a factor of 1 + draw: 0.7 to 1.4
                mode=("bilinear", "nearest"),
                padding_mode="zeros",  # z-scored images: the volume's mean intensity
            )
        )
    if augment:
        steps += [T.RandFlipd(keys, prob=0.5, spatial_axis=axis) for axis in range(3)]
        steps += [
            T.RandScaleIntensityd("image", factors=0.1, prob=0.5),
            T.RandShiftIntensityd("image", offsets=0.1, prob=0.5),
        ]
    if spatial:
        steps += [
            T.RandAdjustContrastd("image", prob=0.3, gamma=(0.7, 1.5)),
            T.RandGaussianNoised("image", prob=0.1, std=0.1),
            T.RandGaussianSmoothd(
                "image", sigma_x=(0.5, 1.0), sigma_y=(0.5, 1.0), sigma_z=(0.5, 1.0), prob=0.2
            ),
        ]
    return T.Compose(steps)


# ----------------------------------------------------------------------------- datasets
class PatchDataset(Dataset):
    """`samples_per_volume` random patches per volume and epoch (training).

    MONAI's random transforms hold their own RNG: it is seeded from torch's RNG once per
    process (main or worker), so workers never repeat each other and `seed_everything` makes
    runs repeatable. MetaTensor tracking is off while cropping (half the cost per item).
    """

    def __init__(
        self,
        volumes: list[dict],
        patch_size,
        samples_per_volume: int,
        augment: bool,
        spatial_augment: bool = False,
    ):
        self.volumes = [prepare_for_patches(v, patch_size) for v in volumes]
        self.samples_per_volume = samples_per_volume
        self.transform = patch_transform(patch_size, augment, spatial_augment)
        self._seeded_for = None

    def __len__(self) -> int:
        return len(self.volumes) * self.samples_per_volume

    def __getitem__(self, i):
        from monai.data import get_track_meta, set_track_meta

        process = (os.getpid(), torch.initial_seed())
        if self._seeded_for != process:
            self.transform.set_random_state(seed=int(torch.randint(0, 2**31 - 1, ()).item()))
            self._seeded_for = process
        tracking = get_track_meta()
        set_track_meta(False)
        try:
            out = self.transform(dict(self.volumes[i % len(self.volumes)]))
        finally:
            set_track_meta(tracking)
        out = out[0] if isinstance(out, list) else out
        return {
            "image": torch.as_tensor(out["image"], dtype=torch.float32),
            "label": torch.as_tensor(out["label"], dtype=torch.long),
        }


class VolumeDataset(Dataset):
    """Whole volumes as they are (validation, test, predict): no resampling or cropping, so a
    predicted mask lines up voxel for voxel with the input file."""

    def __init__(self, volumes: list[dict]):
        self.volumes = volumes

    def __len__(self) -> int:
        return len(self.volumes)

    def __getitem__(self, i):
        v = self.volumes[i]
        return {
            "image": torch.from_numpy(v["image"]),
            "label": torch.from_numpy(v["label"].astype(np.int64)),
            "index": i,
            "affine": torch.from_numpy(v.get("affine", np.eye(4))),
            "path": v.get("path", ""),
            "name": v.get("name", f"case_{i:04d}"),
        }
