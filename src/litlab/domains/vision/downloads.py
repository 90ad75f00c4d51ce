"""The image datasets torchvision downloads: MNIST, Fashion-MNIST, CIFAR-10.

The real download code stays (it needs the internet once); raw files already in `data_dir`
are used as they are, which is how the tests run them offline.
"""

import gzip
import logging
from pathlib import Path

import torch
import torchvision.datasets as tvd

from litlab.domains.vision.data import VisionDataModule, random_affine
from litlab.errors import UserError
from litlab.utils.files import fetching

log = logging.getLogger(__name__)


def read_idx(path: Path) -> torch.Tensor:
    """Read an MNIST-format idx file (plain or .gz) into a uint8 tensor."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise UserError(f"cannot read {path}: {err} (re-download it or delete it)") from err
    ndim = data[3] if len(data) > 4 else 0
    if len(data) < 4 or data[:3] != b"\x00\x00\x08" or ndim not in (1, 3):
        raise UserError(f"{path} is not an idx file (corrupt download?); delete it and retry")
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    body = data[4 + 4 * ndim :]
    if len(body) != torch.Size(shape).numel():
        raise UserError(f"{path} is truncated: expected shape {shape}; delete it and retry")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def _find(raw_dir: Path, stem: str) -> Path | None:
    return next((raw_dir / n for n in (stem, stem + ".gz") if (raw_dir / n).is_file()), None)


class MNISTDataModule(VisionDataModule):
    """MNIST in torchvision's layout (<data_dir>/MNIST/raw).

    Downloads when online. When only the 10k test split is present (as in ../shared/data), it
    is split into train/val/test by seed, with a warning: fine for tests, not for papers.
    """

    dataset_name = data_name = "MNIST"
    mean, std = (0.1307,), (0.3081,)

    def __init__(self, download: bool = True, **kwargs):
        super().__init__(**kwargs)

    @property
    def raw_dir(self) -> Path:
        return self.data_dir / self.dataset_name / "raw"

    @classmethod
    def fold_labels(cls, settings: dict):
        """The label files already on disk (they are small): none yet, checked in setup."""
        raw = Path(str(settings.get("data_dir", "data"))) / cls.dataset_name / "raw"
        found = [_find(raw, f"{split}-labels-idx1-ubyte") for split in ("train", "t10k")]
        return torch.cat([read_idx(p).long() for p in found if p]).numpy() if any(found) else None

    def _split(self, prefix: str):
        images = _find(self.raw_dir, f"{prefix}-images-idx3-ubyte")
        labels = _find(self.raw_dir, f"{prefix}-labels-idx1-ubyte")
        if images and labels:
            return read_idx(images).unsqueeze(1), read_idx(labels).long()
        return None

    def prepare_data(self) -> None:
        if _find(self.raw_dir, "train-images-idx3-ubyte") or not self.hparams.download:
            return
        try:
            with fetching(self.raw_dir):  # quiet; no empty MNIST/raw left when offline
                for train in (True, False):
                    getattr(tvd, self.dataset_name)(str(self.data_dir), train=train, download=True)
        except Exception as err:  # offline: fall back to what is on disk (checked in setup)
            log.warning(
                "%s download failed (%s); using the files in %s",
                self.dataset_name,
                err,
                self.raw_dir,
            )

    def load(self):
        train, test = self._split("train"), self._split("t10k")
        if train is None and test is None:
            raise UserError(
                f"{self.dataset_name} not found in {self.raw_dir} (and download "
                f"{'failed' if self.hparams.download else 'is off'}): put the idx files there"
            )
        if train is None:
            log.warning(
                "%s: only the test split is in %s; splitting its %d images into train/val/test",
                self.dataset_name,
                self.raw_dir,
                len(test[1]),
            )
            self.loaded_sources = [f"test/{i}" for i in range(len(test[1]))], None
            return test, None
        return train, test


class FashionMNISTDataModule(MNISTDataModule):
    """Fashion-MNIST, same format and layout as MNIST (<data_dir>/FashionMNIST/raw)."""

    dataset_name = data_name = "FashionMNIST"
    mean, std = (0.2860,), (0.3530,)


class CIFAR10DataModule(VisionDataModule):
    """CIFAR-10 via torchvision (downloads into data_dir when online)."""

    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    channels, image_size, num_classes = 3, 32, 10
    data_name = "CIFAR-10"

    def __init__(self, download: bool = True, **kwargs):
        super().__init__(**kwargs)

    def augment(self, x):
        return random_affine(x, translate=0.125, hflip=True)

    def prepare_data(self) -> None:
        self.load()

    def _dataset(self, train: bool):
        """(images (N, 3, 32, 32) uint8, labels) of a split, downloaded when absent."""
        try:
            with fetching(self.data_dir):
                ds = tvd.CIFAR10(str(self.data_dir), train=train, download=self.hparams.download)
        except (RuntimeError, OSError) as err:
            raise UserError(f"CIFAR-10 not found in {self.data_dir} ({err})") from err
        return torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous(), torch.tensor(ds.targets)

    def load(self):
        return self._dataset(True), self._dataset(False)
