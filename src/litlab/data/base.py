"""What every split-based datamodule shares: one loader recipe, four Lightning hooks.

A subclass fills `train_set`, `val_set`, `test_set` in `setup` and says how to wrap a dataset in
`loader(dataset, train)`. Under DDP, Lightning adds the distributed sampler itself and
`litlab.utils.distributed` makes the val/test shards unpadded, so no sample counts twice.
"""
import lightning as L
from torch.utils.data import DataLoader


class SplitDataModule(L.LightningDataModule):
    #: the split `predict_dataloader` serves (eval.py sets it to "test" or "val")
    predict_split = "test"

    def loader(self, dataset, train: bool) -> DataLoader:
        raise NotImplementedError

    def train_dataloader(self):
        return self.loader(self.train_set, train=True)

    def val_dataloader(self):
        return self.loader(self.val_set, train=False)

    def test_dataloader(self):
        return self.loader(self.test_set, train=False)

    def predict_dataloader(self):
        return self.loader(getattr(self, f"{self.predict_split}_set"), train=False)
