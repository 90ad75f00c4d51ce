"""Graph classification on the TU Dortmund benchmarks (MUTAG, PROTEINS, ENZYMES...): many small
graphs, mini-batched by PyG's DataLoader, split into seeded stratified folds. PyG's real download
code stays; raw files already in `<data_dir>/TUDataset/<name>/raw` are read as they are (offline),
processed into `<data_dir>/cache/pyg/TUDataset`.
Under DDP the graphs are split between ranks, each counted exactly once at evaluation."""

import logging
from functools import cached_property
from pathlib import Path
from typing import Annotated

import numpy as np
import torch

# isort: split
from torch_geometric.loader import DataLoader

from litlab.bounds import Ge, NonNegInt, OptionalFraction, PosInt, Workers
from litlab.data import splits
from litlab.data.base import SplitDataModule
from litlab.data.splits import stratified_folds, stratified_split
from litlab.domains.graph.data import CachedTUDataset, GraphsInComputeDtype, read_pyg
from litlab.tasks import GRAPH_CLASSIFICATION

log = logging.getLogger(__name__)


class TUDataModule(GraphsInComputeDtype, SplitDataModule):
    """TU Dortmund graph classification benchmarks (MUTAG, PROTEINS, ENZYMES...), mini-batched.

    Fold `fold` of a seeded stratified `num_folds`-fold split is the test set. `val_fraction`
    of the remaining graphs (stratified) validates; with `val_fraction: 0` the test fold is
    also the validation set: the protocol of Xu et al. (optimistic; see docs/graph.md).
    `num_folds` means what it means on every datamodule (data/splits.py), but it defaults to 10
    and is never null here: k-fold is the published protocol of these benchmarks.
    """

    kind = GRAPH_CLASSIFICATION
    loader_class = DataLoader  # PyG's: batches of graphs
    source_column = "graph"

    def __init__(
        self,
        name: str = "MUTAG",
        data_dir: str = "data",
        batch_size: PosInt = 32,
        fold: NonNegInt = 0,
        num_folds: Annotated[int, Ge(2)] = 10,
        val_fraction: OptionalFraction = 0.1,
        use_node_attr: bool = False,
        num_workers: Workers = 0,
        seed: NonNegInt = 0,
    ):
        # PyG's batches are not pinned, its workers not kept
        super().__init__(batch_size, num_workers, persistent_workers=False, pin_memory=False)
        self.data_dir = Path(data_dir)
        self.check_settings(self.hparams, "data")

    @classmethod
    def check_settings(cls, settings, key: str) -> None:
        """fold < num_folds <= the smallest class, from the raw labels when they are on disk
        (one integer a line; before any graph is read), else once the dataset is read."""
        splits.check_fold(settings, key)
        name = str(settings["name"])
        raw = Path(str(settings["data_dir"])) / "TUDataset" / name / "raw"
        labels = raw / f"{name}_graph_labels.txt"
        try:
            found = np.loadtxt(labels, ndmin=1) if labels.is_file() else None
        except ValueError:  # not a label file: PyG's reading says so, in setup
            found = None
        splits.check_labels(found, settings, key, name, "graphs")

    @cached_property
    def dataset(self):
        name = self.hparams.name
        return read_pyg(
            self.data_dir,
            "TUDataset",
            name,
            f"{name}_*.txt",
            lambda root, cache: CachedTUDataset(
                root, name, cache, use_node_attr=self.hparams.use_node_attr
            ),
        )

    def _check_folds(self, dataset) -> None:
        """Every test fold needs a graph of each class: num_folds <= the smallest class."""
        labels = dataset.y.view(-1).numpy()
        splits.check_labels(labels, self.hparams, "data", self.hparams.name, "graphs")

    @property
    def dims(self) -> dict:
        self._check_folds(self.dataset)
        return {
            "in_channels": max(self.dataset.num_features, 1),
            "num_classes": self.dataset.num_classes,
            "kind": self.kind,
        }

    def prepare_data(self) -> None:
        self.dataset  # noqa: B018  (downloads/processes once, on local rank 0)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        h, dataset = self.hparams, self.dataset
        labels = dataset.y.numpy()
        train, test = stratified_folds(labels, h.num_folds, h.fold, h.seed)
        if h.val_fraction > 0:
            fit, val = stratified_split(labels[train], h.val_fraction, h.seed, "data.val_fraction")
            train, val = train[fit], train[val]
        else:
            val = test
        self.train_set, self.val_set, self.test_set = (
            dataset[torch.as_tensor(i)] for i in (train, val, test)
        )
        # each graph by its index in the dataset (with val_fraction 0, val is the test fold)
        self.split_sources = {"train": train.tolist(), "val": val.tolist(), "test": test.tolist()}
