"""3D medical datamodules: segmentation (generated phantoms, NIfTI folders in the Medical
Segmentation Decathlon layout) and classification (generated phantoms; MedMNIST 3D).

Segmentation trains on random patches (half centred on foreground) and evaluates whole volumes
one at a time (sizes differ; the module runs sliding-window inference). Preprocessed volumes
live in memory, shared copy-on-write with DataLoader workers; NIfTI folders are also cached on
disk as one .npz, written atomically by one process.

MedMNIST v2 3D classification sets through the `medmnist` package (its download path; a
local `<flag>.npz` with the same keys is read as is): `MedMNIST3DDataModule`.
"""

from pathlib import Path
from typing import Annotated

import numpy as np
import torch
from torch.utils.data import TensorDataset

from litlab import bounds
from litlab.bounds import Fraction, Ge, NonNegFloat, NonNegInt, PatchSize, PosInt, Seed
from litlab.data import (
    FoldSettings,
    NumFolds,
    SplitDataModule,
    in_compute_dtype,
    settings_split,
    split_indices,
    volume_split,
    write_split,
)
from litlab.domains.medical3d import nifti as N
from litlab.domains.medical3d import volumes as V
from litlab.errors import UserError
from litlab.tasks import VOLUME_CLASSIFICATION, VOLUME_SEGMENTATION


class Medical3DDataModule(FoldSettings, SplitDataModule):
    """Loaders shared by the 3D datamodules; evaluation splits are never padded under DDP.

    `num_folds=K fold=i`: fold i of a seeded K-fold split of the volumes tests (stratified by
    class, or by dominant structure for segmentation); `val_fraction` of the other folds
    validates (test_fraction is not used).
    """

    data_name, fold_pool = "the volumes", "volumes"

    def __init__(
        self,
        batch_size: PosInt = 2,
        augment: bool = True,
        val_fraction: Fraction = 0.1,
        test_fraction: Fraction = 0.2,
        seed: Seed = 42,
        num_folds: NumFolds = None,
        fold: NonNegInt = 0,
        **kwargs,
    ):
        super().__init__(batch_size=batch_size, **kwargs)  # the other loader settings

    @property
    def dims(self) -> dict:
        """Given to the net and module: input channels and classes."""
        return {"in_channels": self.in_channels, "num_classes": self.num_classes}


# ============================================================================ segmentation
class SegmentationDataModule(Medical3DDataModule):
    """Subclasses return preprocessed volumes; this class splits them and builds the datasets."""

    kind = VOLUME_SEGMENTATION
    source_column = "case"

    def __init__(
        self,
        patch_size: PatchSize = (32, 32, 32),
        samples_per_volume: PosInt = 2,
        num_classes: bounds.SegmentClasses = 3,
        split_file: str | None = None,
        spatial_augment: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.patch_size = tuple(int(p) for p in patch_size)
        self.samples_per_volume = samples_per_volume
        self.num_classes, self.in_channels = num_classes, 1
        self.names: list[str] = []

    @property
    def dims(self) -> dict:
        """Also the patch (= the sliding window of evaluation)."""
        return {**super().dims, "patch_size": self.patch_size}

    def eval_batch_size(self) -> int:
        return 1  # whole volumes of different sizes

    def load(self) -> list[dict]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        h = self.hparams
        vols = self.load()
        if h.num_folds is None:
            split = split_indices(len(vols), h.val_fraction, h.test_fraction, h.seed)
        else:  # stratified by each volume's dominant structure; rare ones pooled
            split = volume_split([v["label"] for v in vols], h, self.data_name)
        names = self.names or [f"case_{i:04d}" for i in range(len(vols))]
        self.split_sources = {k: [names[i] for i in v] for k, v in split.items()}
        rank0 = self.trainer is None or self.trainer.is_global_zero
        if h.split_file and rank0 and not Path(h.split_file).exists():
            write_split(Path(h.split_file), self.split_sources)  # once, by rank 0
        self.train_set = V.PatchDataset(
            [vols[i] for i in split["train"]],
            self.patch_size,
            self.samples_per_volume,
            h.augment,
            h.spatial_augment,
        )
        self.val_set = V.VolumeDataset([vols[i] for i in split["val"]])
        self.test_set = V.VolumeDataset([vols[i] for i in split["test"]])

    def sources(self, split: str) -> dict[str, list]:
        """predictions.csv's `case`s, as the module names its rows and masks too."""
        return {"case": [N.case_id(n) for n in self.split_sources[split]]}


class PhantomDataModule(Medical3DDataModule):
    """The settings of generated phantoms (volumes.phantom), shared by the segmentation and the
    classification phantoms; deterministic from `seed`, so they need no download."""

    def __init__(
        self,
        num_volumes: Annotated[int, Ge(3)] = 48,
        size: Annotated[int, Ge(8)] = 32,
        size_jitter: NonNegInt = 4,
        noise: NonNegFloat = 0.1,
        **kwargs,
    ):
        super().__init__(**kwargs)

    data_name = "the phantoms"

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        V.check_phantoms(settings, key)  # sides that hold a nodule, within memory
        super().check_settings(settings, key)

    @classmethod
    def fold_count(cls, settings: dict) -> int:
        return int(settings["num_volumes"])

    def phantoms(self, nodule_probability: float, **kwargs):
        """(index, image, label, has_nodule) of each phantom, in order."""
        h = self.hparams
        for i, shape in enumerate(V.phantom_shapes(h.seed, h.num_volumes, h.size, h.size_jitter)):
            yield i, *V.phantom(h.seed, i, shape, nodule_probability, h.noise, **kwargs)


class PhantomSegmentationDataModule(PhantomDataModule, SegmentationDataModule):
    """Generated phantoms (organ = 1, nodule = 2); the offline default."""

    def __init__(self, nodule_radius=V.NODULE_RADIUS, **kwargs):
        super().__init__(**kwargs)
        self.nodule_radius = tuple(nodule_radius)
        self.num_classes = 3

    def load(self) -> list[dict]:
        return [
            {"image": V.normalize(image), "label": label, "name": f"case_{i:04d}"}
            for i, image, label, _ in self.phantoms(1.0, nodule_radius=self.nodule_radius)
        ]


class NiftiDataModule(SegmentationDataModule):
    """A folder of NIfTI volumes and label maps, MSD layout (imagesTr/+labelsTr/ or
    images/+labels/, matched by file name). `num_classes` counts the background."""

    def __init__(self, root: str, cache_dir: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.root = Path(root)
        self.pairs = self.check_settings({"root": root, "num_classes": self.num_classes}, "data")
        self.names = [p.name for p, _ in self.pairs]
        self.class_names = N.label_names(self.root, self.num_classes)  # export's, the service's
        self.cache_dir = Path(cache_dir) if cache_dir else None

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> list:
        """The folder holds at least 3 image/label pairs, enough for `num_folds`, and names
        its labels well if it names them (read before anything is printed)."""
        return N.folder_pairs(settings, key, cls.check_folds)

    def _cache_path(self) -> Path | None:
        if self.cache_dir is None:
            return None
        files = [f for pair in self.pairs for f in pair]
        # keyed by what the cached volumes depend on: the files, the preprocessing (its version:
        # z-score per channel) and the label check's classes (a cache is never reused unchecked)
        key = N.cache_key(files, version=2, normalize="zscore", num_classes=self.num_classes)
        return self.cache_dir / f"nifti_{key}.npz"

    def _read_all(self) -> list[dict]:
        vols = []
        for image_path, label_path in self.pairs:
            image, affine = N.read_nifti(image_path)
            label, _ = N.read_nifti(label_path)
            N.check_pair(image_path, label_path, image, label[0] if len(label) == 1 else label,
                         self.num_classes)  # fmt: skip
            vols.append(
                {
                    "image": V.normalize(image),
                    "label": label.astype(np.uint8),
                    "affine": affine,
                    "path": str(image_path),
                    "name": image_path.name,
                }
            )
        return vols

    def prepare_data(self) -> None:
        """Runs on one process per node: fill the disk cache once."""
        path = self._cache_path()
        if path is not None and not path.exists():
            N.save_cache(path, self._read_all())

    def load(self) -> list[dict]:
        path = self._cache_path()
        if path is not None and path.exists():
            vols = N.load_cache(path, [p for p, _ in self.pairs])
        else:
            vols = self._read_all()
        self.in_channels = vols[0]["image"].shape[0]
        return vols

    @property
    def dims(self) -> dict:
        if self.train_set is None:  # channels are known once a volume is read
            self.in_channels = N.read_nifti(self.pairs[0][0])[0].shape[0]
        return super().dims


# ============================================================================ classification
class ClassificationDataModule(Medical3DDataModule):
    """Fixed-size volumes in memory (N, C, D, H, W) with integer labels; flips per batch."""

    kind = VOLUME_CLASSIFICATION
    in_channels, num_classes = 1, 2
    source_column = "case"

    def load(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError

    def split(self, images: torch.Tensor, labels: torch.Tensor, ids: list) -> dict:
        """{split: (images, labels)}: seeded train/val/test, or the folds of `num_folds`;
        `ids`: each volume's source, kept by split in `split_sources`."""
        h = self.hparams
        if h.num_folds is None:
            split = split_indices(len(labels), h.val_fraction, h.test_fraction, h.seed)
        else:
            split = settings_split(labels.numpy(), h, self.data_name, "volumes")
        self.split_sources = {k: [ids[i] for i in v] for k, v in split.items()}
        return {
            k: (images[torch.as_tensor(v)], labels[torch.as_tensor(v)]) for k, v in split.items()
        }

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            sets = {k: TensorDataset(*v) for k, v in self.load().items()}
            self.train_set, self.val_set, self.test_set = sets["train"], sets["val"], sets["test"]

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Random flips of each volume along each axis, vectorized on the batch's device."""
        x, y = batch
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x
        if self.hparams.augment and self.trainer is not None and self.trainer.training:
            for axis in (2, 3, 4):
                flip = torch.rand(len(x), device=x.device) < 0.5
                x = torch.where(flip.view(-1, 1, 1, 1, 1), x.flip(axis), x)
        return in_compute_dtype(self.trainer, (x, y))


class PhantomClassificationDataModule(PhantomDataModule, ClassificationDataModule):
    """Generated phantoms labelled 1 when they hold a nodule (half of them); offline default."""

    def __init__(self, num_volumes: Annotated[int, Ge(3)] = 400, **kwargs):
        super().__init__(num_volumes=num_volumes, **kwargs)

    @classmethod
    def fold_labels(cls, settings: dict) -> list[int]:
        """Which phantoms hold a nodule, without generating them (checked before any work)."""
        seed = settings["seed"]
        return [V.phantom_has_nodule(seed, i, 0.5) for i in range(int(settings["num_volumes"]))]

    def load(self):
        from monai.transforms import ResizeWithPadOrCrop

        fit = ResizeWithPadOrCrop([self.hparams.size] * 3)
        images, labels, ids = [], [], []
        for i, image, _, has_nodule in self.phantoms(0.5):
            images.append(torch.as_tensor(np.asarray(fit(V.normalize(image)))))
            labels.append(has_nodule)
            ids.append(f"case_{i:04d}")  # as the segmentation phantoms are named
        return self.split(torch.stack(images), torch.tensor(labels), ids)


# -------------------------------------------------------------- medmnist
class MedMNIST3DDataModule(ClassificationDataModule):
    """MedMNIST v2 3D sets (`flag`: organmnist3d, nodulemnist3d, adrenalmnist3d,
    fracturemnist3d, vesselmnist3d, synapsemnist3d) with their official splits, or k-fold
    over all of them (`num_folds`). Downloads with the `medmnist` package when
    `<data_dir>/<flag>[_64].npz` is absent."""

    source_column = "sample"  # a volume's place in the official splits: "val/12"

    def __init__(
        self,
        flag: str = "nodulemnist3d",
        size: int = 28,
        data_dir: str = "data",
        download: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        info = self.check_settings({"flag": flag, "size": size}, "data")
        self.flag, self.size, self.download = flag, size, download
        self.data_dir = Path(data_dir)
        self.info, self.num_classes = info, len(info["label"])
        self.in_channels = info["n_channels"]

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> dict:
        """A single-label MedMNIST 3D set in a size it comes in (before anything is printed)."""
        import medmnist

        flag, size = settings["flag"], settings["size"]
        if flag not in medmnist.INFO or not flag.endswith("3d"):
            valid = ", ".join(k for k in medmnist.INFO if k.endswith("3d"))
            raise UserError(f"{key}.flag={flag} is not a MedMNIST 3D set; valid: {valid}")
        if size not in (28, 64):
            raise UserError(f"{key}.size={size} is not available; valid: 28, 64")
        info = medmnist.INFO[flag]
        if info["task"] not in ("binary-class", "multi-class"):
            raise UserError(f"{key}.flag={flag} is a {info['task']} task, not single-label")
        cls.check_folds(settings, key, None)
        return info

    @classmethod
    def fold_labels(cls, settings: dict):
        """The labels of an `<flag>.npz` already on disk (not yet downloaded: setup checks)."""
        size = settings.get("size", 28)
        name = f"{settings['flag']}{'' if size == 28 else f'_{size}'}.npz"
        path = Path(str(settings.get("data_dir", "data"))) / name
        if not path.is_file():
            return None
        with np.load(path) as z:
            return np.concatenate([z[f"{s}_labels"].reshape(-1) for s in ("train", "val", "test")])

    @property
    def npz_path(self) -> Path:
        return self.data_dir / f"{self.flag}{'' if self.size == 28 else f'_{self.size}'}.npz"

    def _dataset(self, split: str, download: bool):
        import medmnist

        cls = getattr(medmnist, self.info["python_class"])
        try:
            return cls(split=split, root=str(self.data_dir), download=download, size=self.size)
        except RuntimeError as err:
            raise UserError(
                f"{self.npz_path} not found and the download "
                f"{'failed' if download else 'is off'}: put it there"
            ) from err

    def prepare_data(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.npz_path.is_file():  # the package's md5 check would refuse local copies
            self._dataset("train", download=self.download)

    def load(self):
        out = {}
        for split in ("train", "val", "test"):
            ds = self._dataset(split, download=False)
            images = torch.as_tensor(np.asarray(ds.imgs))
            images = images.unsqueeze(1) if images.ndim == 4 else images.permute(0, 4, 1, 2, 3)
            out[split] = (images.contiguous(), torch.as_tensor(ds.labels).reshape(-1).long())
        # each volume by its place in the official splits: "val/12" is the 13th of val
        ids = {s: [f"{s}/{i}" for i in range(len(out[s][1]))] for s in out}
        if self.hparams.num_folds is None:
            self.split_sources = ids
            return out
        # k-fold: the official splits pooled in their order (train, val, test), then folded
        pooled = [torch.cat([out[s][i] for s in ("train", "val", "test")]) for i in (0, 1)]
        return self.split(*pooled, [i for s in ("train", "val", "test") for i in ids[s]])
