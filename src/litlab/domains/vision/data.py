"""Image classification datamodules: the shared base, `digits` (the default: real data shipped
inside scikit-learn, so it needs no network) and a user's `imagefolder`; the datasets
torchvision downloads are in downloads.py.
"""

from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset
from torchvision.transforms import v2

from litlab.bounds import Fraction, ImageSide, NonNegInt, PosInt, Seed
from litlab.data import (
    FoldSettings,
    NumFolds,
    SplitDataModule,
    check_fits,
    check_step_memory,
    in_compute_dtype,
    settings_split,
    stratified_split,
)
from litlab.errors import UserError, one_line
from litlab.tasks import IMAGE_CLASSIFICATION
from litlab.utils.files import check_regular


# ---------------------------------------------------------------- images
def random_affine(
    x: torch.Tensor,
    degrees: float = 0.0,
    translate: float = 0.0,
    scale: tuple[float, float] = (1.0, 1.0),
    hflip: bool = False,
) -> torch.Tensor:
    """A different random rotation/shift/scale (and flip) for every image of a batch.

    `translate` is a fraction of the image size; empty borders are zero (black).
    """
    n = x.shape[0]

    def uniform(lo, hi):
        return torch.empty(n, device=x.device).uniform_(lo, hi)

    angle = uniform(-degrees, degrees).deg2rad_()
    zoom = uniform(*scale)
    flip = torch.where(torch.rand(n, device=x.device) < 0.5, -1.0, 1.0) if hflip else 1.0
    theta = torch.zeros(n, 2, 3, device=x.device)
    theta[:, 0, 0] = angle.cos() / zoom * flip
    theta[:, 0, 1] = -angle.sin() / zoom
    theta[:, 1, 0] = angle.sin() / zoom * flip
    theta[:, 1, 1] = angle.cos() / zoom
    theta[:, :, 2] = torch.empty(n, 2, device=x.device).uniform_(-2 * translate, 2 * translate)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class TensorImages(Dataset):
    """Images held in memory as a uint8/float tensor (N, C, H, W) with integer labels.

    Items are returned as stored; scaling, augmentation and normalization happen per batch
    (VisionDataModule.on_after_batch_transfer)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def read_image(path: str, header_only: bool = False):
    """An image as RGB PIL (ImageFolder's loader), or one line naming the file it cannot read."""
    from PIL import Image

    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            if header_only:
                return None
            return img.convert("RGB")
    except Exception as err:  # noqa: BLE001 (PIL raises many kinds; all mean a bad file)
        raise UserError(
            f"cannot read image {path}: {one_line(err)}; fix or remove the file"
        ) from None


# ----------------------------------------------------------- datamodules
LEFT = "samples left after the test split (data.test_fraction)"
#: float32 copies of a batch held at once (decoded, scaled, augmented, normalized) and the
#: batches the loader prepares ahead
BATCH_COPIES = 4


class VisionDataModule(FoldSettings, SplitDataModule):
    """Shared split/transform/loader logic; subclasses only say how to read their images.

    `num_folds=K fold=i` pools every labelled image (official test split included) and makes
    fold i of a seeded stratified K-fold split the test set (litlab/data.py).
    """

    kind = IMAGE_CLASSIFICATION
    data_name, fold_pool = "the images", "images"
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)
    channels, image_size, num_classes = 1, 28, 10
    #: `load`'s (training, test or None) images' sources; unset: "train/<i>", "test/<i>"
    loaded_sources: tuple[list, list | None] | None = None
    #: how the service fits an image of another size (None: resized, as training's were)
    fit: str | None = None

    def __init__(
        self,
        data_dir: str = "data",
        batch_size: PosInt = 128,
        augment: bool = True,
        val_fraction: Fraction = 0.1,
        seed: Seed = 42,
        num_folds: NumFolds = None,
        fold: NonNegInt = 0,
        **kwargs,
    ):
        super().__init__(batch_size=batch_size, **kwargs)  # the other loader settings
        self.data_dir = Path(data_dir)

    @property
    def dims(self) -> dict:
        return {
            "in_channels": self.channels,
            "num_classes": self.num_classes,
            "image_size": self.image_size,
        }

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        """Train-time augmentation of a float batch in [0, 1], on the batch's device."""
        return random_affine(x, translate=0.125)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Scale, augment (training only) and normalize whole batches on the device: one
        vectorized op per batch instead of a Python transform per image."""
        x, y = batch
        # in float32 whatever Lightning cast the batch to; `in_compute_dtype` casts the result
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        if self.hparams.augment and self.trainer is not None and self.trainer.training:
            x = self.augment(x)
        mean = torch.tensor(self.mean, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, -1, 1, 1)
        return in_compute_dtype(self.trainer, ((x - mean) / std, y))

    def load(self) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple | None]:
        """((train_images, train_labels), (test_images, test_labels) or None)."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        """Every labelled image in one pool (an official test split after the training
        split): k-fold's fold `fold` tests; else the official test split does (or a stratified
        share of the pool when there is none), and validation is carved from the rest."""
        if self.train_set is not None:
            return
        (images, labels), test = self.load()
        h, official = self.hparams, len(labels)  # where an official test split starts
        ids, test_ids = self.loaded_sources or (
            [f"train/{i}" for i in range(len(labels))],
            None if test is None else [f"test/{i}" for i in range(len(test[1]))],
        )
        if test is not None:
            images, labels = torch.cat([images, test[0]]), torch.cat([labels, test[1]])
            ids = [*ids, *test_ids]
        if h.num_folds is not None:
            split = settings_split(labels.numpy(), h, self.data_name, "images")
        else:
            rest, held = (
                stratified_split(labels, 0.2, h.seed, "the test share")
                if test is None
                else (np.arange(official), np.arange(official, len(labels)))
            )
            fit, val = stratified_split(
                labels[rest], h.val_fraction, h.seed, "data.val_fraction", LEFT
            )
            split = {"train": rest[fit], "val": rest[val], "test": held}
        self.train_set, self.val_set, self.test_set = (
            TensorImages(images[split[s]], labels[split[s]]) for s in ("train", "val", "test")
        )
        self.split_sources = {k: [ids[i] for i in v] for k, v in split.items()}


class DigitsDataModule(VisionDataModule):
    """scikit-learn's 1,797 handwritten digits (8x8, 16 grey levels): real, offline, fast.

    Stratified train/val/test split by seed (test_fraction of all, val_fraction of the rest);
    with `num_folds` the test set is a fold instead (test_fraction is not used).
    """

    mean, std = (0.3051,), (0.3781,)
    channels, image_size, num_classes = 1, 8, 10
    data_name = "digits"

    def __init__(self, test_fraction: Fraction = 0.2, **kwargs):
        super().__init__(**kwargs)

    def augment(self, x):
        return random_affine(x, degrees=8, translate=0.08, scale=(0.9, 1.1))

    @staticmethod
    def source_files() -> list[Path]:
        """The file scikit-learn reads the digits from (provenance.json's data checksum)."""
        from importlib.resources import files

        return [Path(str(files("sklearn.datasets") / "data" / "digits.csv.gz"))]

    @classmethod
    def fold_labels(cls, settings: dict):
        from sklearn.datasets import load_digits

        return load_digits().target

    def load(self):
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = torch.tensor(digits.target, dtype=torch.long)
        if self.hparams.num_folds is not None:  # every image is in one fold's test set
            self.loaded_sources = list(range(len(labels))), None
            return (images, labels), None
        rest, test = stratified_split(
            labels, self.hparams.test_fraction, self.hparams.seed, "data.test_fraction"
        )
        self.loaded_sources = rest.tolist(), test.tolist()  # places in load_digits()
        return (images[rest], labels[rest]), (images[test], labels[test])


class ImageFolderDataModule(VisionDataModule):
    """A folder of class sub-folders (`root/cat/*.png`, `root/dog/*.png`), read lazily.

    With `root/train` (and optionally `root/val`, `root/test`) those splits are used as is
    (and k-fold is refused: they are the user's fixed split); otherwise the images are split
    into train/val/test by seed, stratified by class, or into `num_folds` folds.
    """

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    source_column = "image"  # the file, relative to data.root

    def __init__(
        self,
        root: str,
        image_size: ImageSide = 64,
        channels: Literal[1, 3] = 3,
        test_fraction: Fraction = 0.2,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.root, self.image_size, self.channels = Path(root), image_size, channels
        if channels == 1:
            self.mean, self.std = (0.5,), (0.5,)
        self.classes = self.class_folders(self.root, "data")
        self.num_classes = len(self.classes)

    def check_training_step(self, net, device) -> None:
        check_step_memory(net, self, device)  # data.image_size is the user's

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        root = Path(str(settings["root"]))
        cls.class_folders(root, key)
        size, batch = int(settings.get("image_size", 64)), int(settings.get("batch_size", 128))
        channels = int(settings.get("channels", 3))
        check_fits(
            batch * channels * size * size * BATCH_COPIES * 4,
            f"{key}.image_size={size}: batches of {batch} images of {channels}x{size}x{size}",
            f"lower {key}.image_size or {key}.batch_size",
        )
        if settings.get("num_folds") is not None and (root / "train").is_dir():
            raise UserError(
                f"{key}.num_folds={settings['num_folds']}: {root} has fixed train/val/test "
                f"sub-folders; k-fold needs one folder of class sub-folders (or {key}.num_folds=null)"
            )
        super().check_settings(settings, key)

    @classmethod
    def fold_labels(cls, settings: dict) -> list[int]:
        """One label per image file, as ImageFolder will find them (names only, nothing read)."""
        root = Path(str(settings["root"]))
        classes = cls.class_folders(root, "data")
        found = make_dataset(
            str(root), {c: i for i, c in enumerate(classes)}, IMG_EXTENSIONS, None, True
        )
        return [label for _, label in found]

    @staticmethod
    def class_folders(root: Path, key: str) -> list[str]:
        """The class sub-folders (of root/train when there is one); at least 2."""
        if not root.is_dir():
            raise UserError(f"{key}.root={root} is not a folder (expected class sub-folders)")
        split_root = root / "train" if (root / "train").is_dir() else root
        classes = sorted(p.name for p in split_root.iterdir() if p.is_dir())
        if len(classes) < 2:
            raise UserError(
                f"{key}.root={root} needs at least 2 class sub-folders, "
                f"found {len(classes)}: {classes}"
            )
        return classes

    def _folder(self, split: str):
        decode = v2.Compose(
            [
                v2.Grayscale(self.channels) if self.channels == 1 else v2.RGB(),
                v2.Resize(self.image_size),
                v2.CenterCrop(self.image_size),
                v2.PILToTensor(),
            ]
        )
        root = self.root / split if (self.root / "train").is_dir() else self.root
        folder = ImageFolder(str(root), transform=decode, allow_empty=False, loader=read_image)
        for path, _ in folder.samples:  # headers only: a broken file fails now, by name
            check_regular(path, f"image {path}", "a class folder holds image files")
            read_image(path, header_only=True)
        return folder

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        h = self.hparams
        train = self._folder("train")
        if (self.root / "train").is_dir():
            has = {s: (self.root / s).is_dir() for s in ("val", "test")}
            idx, val_idx = (
                (range(len(train)), None)
                if has["val"]
                else stratified_split(train.targets, h.val_fraction, h.seed, "data.val_fraction")
            )
            self.train_set = Subset(train, idx)
            self.val_set = self._folder("val") if has["val"] else Subset(train, val_idx)
            self.test_set = self._folder("test") if has["test"] else self.val_set
        elif h.num_folds is not None:
            split = settings_split(train.targets, h, str(self.root), "images")
            self.train_set, self.val_set, self.test_set = (
                Subset(train, split[s].tolist()) for s in ("train", "val", "test")
            )
        else:
            rest, test_idx = stratified_split(
                train.targets, h.test_fraction, h.seed, "data.test_fraction"
            )
            tr, va = stratified_split(
                [train.targets[i] for i in rest], h.val_fraction, h.seed, "data.val_fraction", LEFT
            )
            self.train_set = Subset(train, rest[tr])
            self.val_set, self.test_set = Subset(train, rest[va]), Subset(train, test_idx)
        self.split_sources = {s: self._files(s) for s in ("train", "val", "test")}

    def _files(self, split: str) -> list[str]:
        """The image files of a split (a folder or a subset of one), relative to data.root."""
        dataset = getattr(self, f"{split}_set")
        indices = dataset.indices if hasattr(dataset, "indices") else range(len(dataset))
        folder = dataset.dataset if hasattr(dataset, "indices") else dataset
        return [Path(folder.samples[i][0]).relative_to(self.root).as_posix() for i in indices]
