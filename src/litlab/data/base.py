"""What every split-based datamodule shares: the loader settings, one loader recipe, four
Lightning hooks.

A subclass fills `train_set`, `val_set`, `test_set` in `setup`. `SplitDataModule.__init__` saves
the constructor arguments of the whole subclass chain as hparams; its own are the loader
settings (`batch_size`, `num_workers`, `persistent_workers`, `pin_memory`), which `loader` turns
into a `loader_class` (torch's DataLoader; PyG's for graphs). `setup` also fills `split_sources`:
each split's items named by their source, in the order of the split's dataset (a run's
data_split.json; eval.py's predictions.csv names its rows by them). Under DDP, Lightning adds the distributed sampler itself and
`litlab.utils.distributed` makes the val/test shards unpadded, so no sample counts twice.

What a datamodule will hold in memory, checked against the machine before it allocates: a
setting that pads each image to a 60000 x 60000 canvas is refused in one line naming it, not
met as the kernel's OOM kill (or minutes of swapping) in the middle of reading the data."""

import lightning as L
import torch
from torch.utils.data import DataLoader

from litlab.bounds import PosInt, Workers
from litlab.errors import UserError


class SplitDataModule(L.LightningDataModule):
    #: the split `predict_dataloader` serves (eval.py sets it to "test" or "val")
    predict_split = "test"
    loader_class = DataLoader
    #: the predictions.csv column of an item's source (`row`, `image`, `sample`, ...)
    source_column = "sample"

    #: {split: [source of each item]} once set up, e.g. {"train": [0, 3, ...], ...}
    split_sources: dict[str, list] | None = None

    def __init__(
        self,
        batch_size: PosInt = 32,
        num_workers: Workers = 0,
        persistent_workers: bool = False,
        pin_memory: bool | None = None,
    ):
        super().__init__()
        self.save_hyperparameters(logger=False)  # also the subclasses' arguments
        self.train_set = self.val_set = self.test_set = None

    def loader(self, dataset, train: bool) -> DataLoader:
        """Shuffled training batches, ordered eval batches (of `eval_batch_size`)."""
        h = self.hparams
        # pin_memory null: pinned only when there is a GPU to copy to
        pin = torch.cuda.is_available() if h.pin_memory is None else h.pin_memory
        return self.loader_class(
            dataset,
            batch_size=h.batch_size if train else self.eval_batch_size(),
            shuffle=train,
            num_workers=h.num_workers,
            pin_memory=pin,
            persistent_workers=h.persistent_workers and h.num_workers > 0,
        )

    def sources(self, split: str) -> dict[str, list]:
        """predictions.csv's columns naming the source of each row predicted on `split`, in
        the order of its rows (one row an item here; a subclass whose rows are parts of items,
        slices of a volume, says which)."""
        if not self.split_sources:
            return {}
        return {self.source_column: list(self.split_sources[split])}

    def eval_batch_size(self) -> int:
        return self.hparams.batch_size

    def train_dataloader(self):
        return self.loader(self.train_set, train=True)

    def val_dataloader(self):
        return self.loader(self.val_set, train=False)

    def test_dataloader(self):
        return self.loader(self.test_set, train=False)

    def predict_dataloader(self):
        return self.loader(getattr(self, f"{self.predict_split}_set"), train=False)


# ---------------------------------------------------------------- memory
#: the share of this machine's memory a datamodule's arrays may take (the rest: the net, its
#: activations, the loader's batches, the other processes)
SHARE = 0.5


def budget() -> int:
    """Bytes the data may take here: SHARE of the physical memory."""
    import psutil

    return int(psutil.virtual_memory().total * SHARE)


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def check_fits(nbytes: float, what: str, advice: str) -> None:
    """One line when `what` (e.g. "data.image_size=60000 pads each of the 24 images to
    60000x60000: they") needs more than the budget; `advice` says which setting to lower."""
    limit = budget()
    if nbytes > limit:
        raise UserError(
            f"{what} take {gib(nbytes)} in memory, more than {SHARE:.0%} of this machine's "
            f"{gib(limit / SHARE)}; {advice}"
        )
