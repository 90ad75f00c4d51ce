"""MedMNIST v2 3D classification sets through the `medmnist` package (its download path; a
local `<flag>.npz` with the same keys is read as is)."""

from pathlib import Path

import numpy as np
import torch

from litlab.domains.medical3d.data import ClassificationDataModule
from litlab.errors import UserError


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
