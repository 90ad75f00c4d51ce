"""2D segmentation datamodules: axial slices of NIfTI volumes (`data=hippocampus2d`) and a
user's images/ + masks/ folders (`data=masks`).

Items are split, never their slices: a volume's slices are all in one split (and images of
one `data.group`, e.g. slices a user exported from one volume). Training draws random slices;
evaluation batches hold one whole item (all slices of a volume, or one image), so the Dice of a
batch is the Dice of an item, as for 3D segmentation (and DDP shards items). Intensities are in
[0, 1] (a volume windowed at its own 0.5th and 99.5th percentiles: slices.window; an image /
255, or / 65535 at 16 bits), then normalized by the training slices' mean and standard
deviation in the batch hook: what an exported file's metadata states, so a served PNG is read
as training read its slices.
"""

import logging
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from litlab.bounds import Fraction, ImageSide, NonNegInt, PosInt, Seed, SegmentClasses
from litlab.data import (
    FoldSettings,
    NumFolds,
    SplitDataModule,
    check_count,
    check_fits,
    check_fold,
    check_step_memory,
    in_compute_dtype,
    split_indices,
    volume_split,
)
from litlab.domains.medical3d import nifti as N
from litlab.domains.segmentation2d import slices as S
from litlab.errors import UserError
from litlab.tasks import IMAGE_SEGMENTATION
from litlab.tasks.units import dominant_structure
from litlab.utils.distributed import is_rank_zero
from litlab.utils.files import check_regular

log = logging.getLogger(__name__)


class Items(Dataset):
    """Whole items for evaluation, one a batch: (slices (S, C, H, W), labels (S, H, W)).
    `labels`: each item's dominant foreground structure (federated partitions read it)."""

    def __init__(self, items: list[tuple[torch.Tensor, torch.Tensor]]):
        self.items = items
        self.labels = [dominant_structure(y.numpy()) for _, y in items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.items[index]


class SliceDataModule(FoldSettings, SplitDataModule):
    """Subclasses return items (`load`): (images (S, C, H, W) in [0, 1], labels (S, H, W)) of
    `image_size` squares, and their names; `shapes` holds each item's (height, width) before
    padding."""

    kind = IMAGE_SEGMENTATION
    data_name, fold_pool = "the items", "items"
    #: what an item is in predictions.csv: a volume (a row per slice) or an image
    source_column = "volume"
    #: a served image of another size is zero-padded as training's were (exported metadata)
    fit = "pad"

    def __init__(
        self,
        num_classes: SegmentClasses = 3,
        image_size: ImageSide = 64,
        batch_size: PosInt = 32,
        augment: bool = True,
        val_fraction: Fraction = 0.1,
        test_fraction: Fraction = 0.2,
        num_folds: NumFolds = None,
        fold: NonNegInt = 0,
        seed: Seed = 42,
        **kwargs,
    ):
        super().__init__(batch_size=batch_size, **kwargs)  # the other loader settings
        self.num_classes, self.image_size, self.channels = num_classes, image_size, 1
        self.mean, self.std = (0.0,), (1.0,)
        self.names: list[str] = []
        self.shapes: list[tuple[int, int]] = []
        self.slice_counts: list[int] = []
        self.split: dict[str, list[int]] = {}

    def check_training_step(self, net, device) -> None:
        check_step_memory(net, self, device)  # data.image_size is the user's

    @property
    def dims(self) -> dict:
        """Also the side items are padded to: a net's strides must divide it (check_dims)."""
        return {
            "in_channels": self.channels,
            "num_classes": self.num_classes,
            "image_size": self.image_size,
        }

    def load(self) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[str]]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        items, self.names = self.load()
        self.channels = int(items[0][0].shape[1])
        warn_absent_classes([y for _, y in items], self.num_classes, getattr(self, "root", ""))
        self.slice_counts = [len(x) for x, _ in items]
        self.split = split = self.split_items(items)
        self.split_sources = {k: [self.names[i] for i in v] for k, v in split.items()}
        train = zip(*(items[i] for i in split["train"]))  # the items' slices, their labels
        self.train_set = TensorDataset(*(torch.cat(part) for part in train))
        self.val_set, self.test_set = (Items([items[i] for i in split[s]]) for s in ("val", "test"))
        train = self.train_set.tensors[0]
        self.mean = tuple(train.mean((0, 2, 3)).tolist())
        self.std = tuple(train.std((0, 2, 3)).clamp_min(1e-3).tolist())

    def split_items(self, items) -> dict[str, list[int]]:
        """Items by split: seeded, or fold `fold` (stratified by dominant structure)."""
        h = self.hparams
        if h.num_folds is None:
            return split_indices(len(items), h.val_fraction, h.test_fraction, h.seed)
        return volume_split([y.numpy() for _, y in items], h, self.data_name)

    def mask_files(self, split: str) -> list[list[str]]:
        """The predicted masks' PNG names of each item of `split` (slices.mask_names)."""
        names, counts, volume = self.names, self.slice_counts, self.source_column != "image"
        return [S.mask_names(names[i], counts[i], volume) for i in self.split[split]]

    def sources(self, split: str) -> dict[str, list]:
        """A row per slice: its volume and slice number (or its image), and its mask's file."""
        items, files = self.split[split], self.mask_files(split)
        names = [self.names[i] for i, f in zip(items, files) for _ in f]
        out = {self.source_column: names}
        if self.source_column != "image":
            out["slice"] = [k for f in files for k in range(len(f))]
        return out | {"mask": [f"masks/{name}" for f in files for name in f]}

    def eval_batch_size(self) -> int:
        return 1  # one whole item (its slices) a batch: under DDP, items are sharded

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        x, y = batch
        if x.dim() == 5:  # an evaluation batch: one item, its slices along dim 1
            x, y = x[0], y[0]
        if self.trainer is not None and self.trainer.training and self.hparams.augment:
            flip = torch.rand(len(x), device=x.device) < 0.5  # left-right, per slice
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            y = torch.where(flip[:, None, None], y.flip(-1), y)
        mean = torch.tensor(self.mean, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, -1, 1, 1)
        return in_compute_dtype(self.trainer, ((x - mean) / std, y.long()))


class Hippocampus2DDataModule(SliceDataModule):
    """Axial slices of NIfTI volumes with label maps (MSD layout: images/ + labels/ or
    imagesTr/ + labelsTr/): each volume windowed to [0, 1], sliced along its last axis,
    padded to `image_size` squares."""

    def __init__(self, root: str, **kwargs):
        super().__init__(**kwargs)
        self.root = Path(root)
        self.pairs = self.check_settings({"root": root, **kwargs}, "data")
        self.class_names = N.label_names(self.root, self.num_classes)  # export's, the service's

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> list:
        return N.folder_pairs(settings, key, cls.check_folds)

    def load(self):
        items, size, self.shapes = [], self.image_size, []
        shapes = [N.header_shape(image) for image, _ in self.pairs]
        slices, channels = sum(s[2] for s in shapes), max(s[3] if len(s) > 3 else 1 for s in shapes)
        what = f"data.image_size={size} pads each of the {slices} slices"
        check_memory(slices, size, what, channels)
        for image_path, label_path in self.pairs:
            image, label = N.read_nifti(image_path)[0], N.read_nifti(label_path)[0]
            label = label[0] if len(label) == 1 else label
            N.check_pair(image_path, label_path, image, label, self.num_classes)
            S.check_side(label_path, *label.shape[:2], size)  # a slice is (D, H)
            self.shapes.append(tuple(label.shape[:2]))
            x = S.pad_to(np.moveaxis(S.window(image), -1, 0), size)  # (S, C, D, H): last axis
            y = S.pad_to(np.moveaxis(label, -1, 0), size)  # (S, D, H)
            items.append((torch.from_numpy(x).float(), torch.from_numpy(y.astype(np.uint8))))
        return items, [p.name for p, _ in self.pairs]


class MaskFolderDataModule(SliceDataModule):
    """A user's images and label maps: `root/images/*.png` and `root/masks/<same name>.png`
    (or `<stem>.png` beside a JPEG image; masks of whole label values 0..num_classes-1, the
    images' size, in a lossless file: files.py). Images smaller than `image_size` are padded,
    larger ones refused. Images are split one by one, unless `group` (a regex on their file
    names) names groups that stay whole: slices exported from one volume are alike, and a test
    slice whose neighbours were trained on would score a Dice no new volume gets."""

    source_column = "image"

    def __init__(self, root: str, group: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.root = Path(root)
        self.pairs = self.check_settings({"root": root, "group": group, **kwargs}, "data")

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> list[tuple[Path, Path]]:
        """Every image has a mask of its size, with labels below num_classes: the first one
        that does not is named, before anything is written; so is a `group` that does not
        name at least 3 groups (train, val, test)."""
        root = Path(str(settings["root"]))
        images, masks = root / "images", root / "masks"
        if not images.is_dir() or not masks.is_dir():
            raise UserError(f"{key}.root={root} needs images/ and masks/ folders")
        found = sorted(p for p in images.iterdir() if p.suffix.lower() in S.IMAGE_SUFFIXES)
        if len(found) < 3:
            raise UserError(f"{key}.root={root}: {len(found)} images in images/; at least 3")
        pairs, classes = [], int(settings.get("num_classes", 3))
        size = int(settings.get("image_size", 64))
        check_memory(
            len(found), size, f"{key}.image_size={size} pads each of the {len(found)} images"
        )
        for image in found:
            check_regular(
                image, f"{key}.root={root}: images/{image.name}", "images/ holds image files"
            )
            mask = S.mask_of(image, masks)
            if mask is None:
                raise UserError(f"{image} has no mask: expected {masks / image.name}")
            check_regular(mask, f"{key}.root={root}: masks/{mask.name}", "masks/ holds image files")
            shape, values = S.grey(image, size).shape, S.labels(mask)
            if tuple(values.shape) != tuple(shape):
                raise UserError(
                    f"{mask} has shape {list(values.shape)}, its image {list(shape)}: a mask "
                    "is one label per pixel of its image (one channel)"
                )
            N.check_label_map(mask, values, classes)
            pairs.append((image, mask))
        groups = S.image_groups([p.name for p, _ in pairs], settings.get("group"), key)
        if groups is None:
            cls.check_folds(settings, key, len(pairs))
        else:  # the groups are what is split (and folded)
            check_fold(settings, key)
            check_count(len(set(groups)), settings, key, f"{key}.group's groups", "groups")
        return pairs

    def load(self):
        items, self.shapes = [], []
        for image, mask in self.pairs:  # checked: whole labels below num_classes fit in 8 bits
            x, y = S.grey(image), S.labels(mask).astype(np.uint8)
            self.shapes.append(tuple(y.shape))
            x, y = S.pad_to(x[None, None], self.image_size), S.pad_to(y[None], self.image_size)
            items.append((torch.from_numpy(x), torch.from_numpy(y)))
        return items, [p.name for p, _ in self.pairs]

    def split_items(self, items) -> dict[str, list[int]]:
        """With `group`: the groups are split (or folded, stratified by the dominant structure
        of their images together), each image going where its group goes."""
        if self.hparams.group is None:
            return super().split_items(items)
        groups = S.image_groups(self.names, self.hparams.group, "data")
        return S.group_split(groups, [y for _, y in items], self.hparams)


def check_memory(items: int, size: int, what: str, channels: int = 1) -> None:
    """The padded items fit in memory: float32 intensities and 8-bit labels, held twice while
    the training slices are joined into one tensor."""
    check_fits(
        2 * items * size * size * (4 * channels + 1),
        f"{what} to {size}x{size}: they",
        "set data.image_size to the largest side of the items (it only needs to hold them)",
    )


def warn_absent_classes(label_maps: list[torch.Tensor], num_classes: int, root) -> None:
    """One warning line (rank 0's) when a class occurs in no label map: all background trains
    to a Dice of 0 without a word, and a class nothing shows has no Dice worth reading."""
    if not is_rank_zero():
        return
    counts = sum(torch.bincount(y.flatten().long(), minlength=num_classes) for y in label_maps)
    absent = [k for k in range(1, num_classes) if counts[k] == 0]
    if len(absent) == num_classes - 1:
        log.warning(
            "data.root=%s: every label map is background (label 0) only: there is nothing to "
            "segment, and the Dice will stay 0",
            root,
        )
    elif absent:
        log.warning(
            "data.root=%s: label %s occurs in no label map (data.num_classes=%d): nothing "
            "teaches it, and its Dice (val/dice_%d) means nothing",
            root,
            ", ".join(map(str, absent)),
            num_classes,
            absent[0],
        )
