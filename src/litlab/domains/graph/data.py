"""Graph datamodules (PyTorch Geometric): node classification on one graph, graph
classification on many (the TU Dortmund benchmarks, mini-batched, in seeded stratified folds).

`sbm` (the default) is generated locally from a seed, so it needs no network. Planetoid and
TUDataset keep PyG's real download code and also read raw files already in
`<data_dir>/<collection>/<name>/raw` (how the tests run offline). PyG's processed files go to
`<data_dir>/cache/pyg/<collection>`, a folder litlab owns: never beside the raw files, whose
folder may be a read-only copy or a link to a shared one.

DDP: a single graph is given whole to every rank (the module splits the nodes of each mask
between ranks); graph datasets are split between ranks, without the padding duplicates of
Lightning's default sampler at evaluation, so every graph is counted exactly once.
"""

import copy
import os
import urllib.error
from functools import cached_property
from operator import itemgetter
from pathlib import Path
from typing import Annotated, Literal

import lightning as L
import numpy as np
import torch
from filelock import FileLock

# isort: split
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import DistributedSampler
from torch_geometric.data import Data
from torch_geometric.datasets import KarateClub, Planetoid, TUDataset
from torch_geometric.loader import DataLoader
from torch_geometric.transforms import NormalizeFeatures
from torch_geometric.utils import index_to_mask, stochastic_blockmodel_graph

from litlab.bounds import Ge, Interval, NonNegInt, OptionalFraction, PosInt, Workers
from litlab.data import (
    SplitDataModule,
    check_fold,
    check_labels,
    compute_dtype,
    stratified_folds,
    stratified_split,
)
from litlab.errors import UserError
from litlab.tasks import GRAPH_CLASSIFICATION, NODE_CLASSIFICATION
from litlab.utils.files import fetching


def pyg_cache(data_dir: Path, collection: str) -> Path:
    """Where PyG's processed files of a `collection` (Planetoid, TUDataset) go."""
    return Path(data_dir) / "cache" / "pyg" / collection


class _ProcessedInCache:
    """A PyG dataset whose processed files go to `self.cache`, in PyG's own layout below it
    (`<name>/processed`, `<name>/geom-gcn/processed`...); its raw files stay where they are."""

    def __init__(self, root: str, name: str, cache: str, **kwargs):
        self.cache = cache  # before PyG's __init__, which processes
        super().__init__(root, name, **kwargs)

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.cache, os.path.relpath(super().processed_dir, self.root))


class CachedPlanetoid(_ProcessedInCache, Planetoid):
    """PyG's Planetoid, processed into `cache`."""


class CachedTUDataset(_ProcessedInCache, TUDataset):
    """PyG's TUDataset, processed into `cache`."""


def read_pyg(data_dir: Path, collection: str, name: str, raw_files: str, read):
    """`read(root, cache)` (a PyG dataset of `<data_dir>/<collection>`, processed into
    `cache`) under the cache's lock, downloading into `<root>/<name>/raw` when the files are
    not there; a failed download is one line that says which files to copy where (how to run
    offline), and leaves no folder it created. The lock: DDP ranks may build `dims` at the
    same time, and PyG writes processed files the first time a dataset is read."""
    root, cache = Path(data_dir) / collection, pyg_cache(data_dir, collection)
    try:
        with fetching(root / name / "raw"), fetching(cache):
            try:  # the data dir must be writable (its raw folders may be read-only)
                cache.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise UserError(
                    f"PyG's processed files of {root / name} go to {cache}, which cannot be "
                    f"created ({err.strerror or err}); point paths.data_dir (or "
                    f"LITLAB_DATA_DIR) at a writable folder that holds a copy of "
                    f"{collection}/{name}/raw or a link to it (that folder itself may be "
                    "read-only)"
                ) from None
            with FileLock(str(cache / ".litlab.lock")):
                return read(str(root), str(cache))
    except (urllib.error.URLError, OSError) as err:
        raise UserError(
            f"{name} is not in {root / name / 'raw'} and downloading it failed ({err}); "
            f"connect to the internet once, copy the {raw_files} files there, or pass "
            f"paths.data_dir=FOLDER (or set LITLAB_DATA_DIR) where {collection}/{name} "
            f"already is"
        ) from err


Probability01 = Annotated[float, Interval(ge=0, le=1)]


class _WholeGraphOnEveryRank(DistributedSampler):
    """Index 0 on every rank, once: keeps Lightning from injecting its padding sampler."""

    def __init__(self):  # no process group needed
        self.epoch = 0

    def __iter__(self):
        return iter([0])

    def __len__(self) -> int:
        return 1


class GraphsInComputeDtype:
    """The transfer hook of the graph datamodules: under `bf16-true` (weights in any dtype but
    float32) a graph's float tensors are cast to the weights' dtype, since Lightning's precision
    plugin casts a batch's tensors but does not enter a PyG object. The cast is made on a
    shallow copy: a node datamodule yields the dataset's own graph every step, which stays
    float32 for eval, export and the next run."""

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        dtype = compute_dtype(self.trainer)
        if dtype is None:
            return batch
        return copy.copy(batch).apply(lambda t: t.to(dtype) if t.is_floating_point() else t)


class NodeDataModule(GraphsInComputeDtype, L.LightningDataModule):
    """One graph with boolean `train_mask`/`val_mask`/`test_mask`; each loader yields it whole.

    Its masks are the benchmark's protocol (Planetoid's public split, a few labelled nodes per
    class), so `num_folds` (k-fold on every other datamodule) is refused here in one line: a
    k-fold over nodes would be another task, not the published one.
    """

    kind = NODE_CLASSIFICATION
    predict_split = "test"

    def __init__(
        self,
        data_dir: str = "data",
        normalize_features: bool = False,
        num_folds: int | None = None,
        fold: NonNegInt = 0,
    ):
        super().__init__()
        self.data_dir = Path(data_dir)
        self.normalize_features = normalize_features

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        folds, fold = settings.get("num_folds"), settings.get("fold", 0)
        if folds is not None or fold:
            setting = f"num_folds={folds}" if folds is not None else f"fold={fold}"
            raise UserError(
                f"{key}.{setting}: {cls.__name__} keeps the benchmark's fixed node split "
                f"(train/val/test masks), k-fold is not available; leave {key}.num_folds=null"
            )

    def load(self) -> Data:
        raise NotImplementedError

    @cached_property
    def data(self) -> Data:
        """Loaded once per process (cheap after the first time: PyG caches processed files)."""
        data = self.load()
        return NormalizeFeatures()(data) if self.normalize_features else data

    @property
    def dims(self) -> dict:
        return {
            "in_channels": self.data.num_features,
            "num_classes": int(self.data.y.max()) + 1,
            "kind": self.kind,
        }

    def prepare_data(self) -> None:
        self.data  # noqa: B018  (downloads/processes once, on local rank 0)

    @property
    def split_sources(self) -> dict[str, list[int]]:
        """The nodes of each split (its mask's), by index in the graph: data_split.json."""
        return {
            s: self.data[f"{s}_mask"].nonzero().view(-1).tolist() for s in ("train", "val", "test")
        }

    def sources(self, split: str) -> dict[str, list[int]]:
        """predictions.csv's `node` (the module names its rows by node too, as it predicts)."""
        return {"node": self.split_sources[split]}

    def train_dataloader(self) -> DataLoader:
        """The whole graph, on every rank (`_WholeGraphOnEveryRank`), for every split."""
        distributed = self.trainer is not None and self.trainer.world_size > 1
        return TorchDataLoader(
            [self.data],
            batch_size=1,
            collate_fn=itemgetter(0),  # the graph itself: PyG's Batch would copy it every step
            sampler=_WholeGraphOnEveryRank() if distributed else None,
        )

    val_dataloader = test_dataloader = predict_dataloader = train_dataloader


class SBMDataModule(NodeDataModule):
    """A homophilous stochastic block model whose node features alone are weakly informative.

    Nodes link within their class with probability `p_in`, across with `p_out`; features are a
    faint class centroid (`feature_signal`) plus unit Gaussian noise. A GCN, which averages
    neighbours, recovers the classes; an MLP on the features alone cannot. Generated from
    `graph_seed` (not the run seed), so every run sees the same graph.
    """

    def __init__(
        self,
        num_classes: Annotated[int, Ge(2)] = 4,
        nodes_per_class: PosInt = 250,
        p_in: Probability01 = 0.03,
        p_out: Probability01 = 0.003,
        num_features: PosInt = 32,
        feature_signal: float = 0.2,
        train_per_class: PosInt = 20,
        num_val: PosInt = 200,
        num_test: PosInt = 500,
        graph_seed: NonNegInt = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.save_hyperparameters(logger=False)  # plain values: checkpoints stay weights_only

    def load(self) -> Data:
        h = self.hparams
        k, n = h.num_classes, h.nodes_per_class
        probs = torch.full((k, k), h.p_out).fill_diagonal_(h.p_in)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(h.graph_seed)
            edge_index = stochastic_blockmodel_graph([n] * k, probs)
            y = torch.arange(k).repeat_interleave(n)
            centroids = torch.nn.functional.normalize(torch.randn(k, h.num_features), dim=1)
            x = h.feature_signal * centroids[y] * h.num_features**0.5 + torch.randn(
                k * n, h.num_features
            )
            order = torch.randperm(k * n)
        train = torch.cat([order[y[order] == c][: h.train_per_class] for c in range(k)])
        rest = order[~torch.isin(order, train)]
        held = {"val": rest[: h.num_val], "test": rest[h.num_val : h.num_val + h.num_test]}
        masks = {f"{s}_mask": index_to_mask(i, k * n) for s, i in {"train": train, **held}.items()}
        return Data(x=x, edge_index=edge_index, y=y, **masks)


class PlanetoidDataModule(NodeDataModule):
    """Cora, CiteSeer, PubMed citation graphs with the Planetoid split (PyG's `Planetoid`)."""

    def __init__(
        self,
        name: str = "Cora",
        split: Literal["public", "full", "geom-gcn", "random"] = "public",
        normalize_features: bool = True,
        **kwargs,
    ):
        super().__init__(normalize_features=normalize_features, **kwargs)
        self.name, self.split = name, split

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        super().check_settings(settings, key)
        if str(settings["name"]).lower() not in ("cora", "citeseer", "pubmed"):
            raise UserError(
                f"{key}.name={settings['name']} is not a Planetoid graph; valid: "
                f"Cora, CiteSeer, PubMed"
            )

    def load(self) -> Data:
        return read_pyg(
            self.data_dir,
            "Planetoid",
            self.name,
            f"ind.{self.name.lower()}.*",
            lambda root, cache: CachedPlanetoid(root, self.name, cache, split=self.split)[0],
        )


class KarateDataModule(NodeDataModule):
    """Zachary's karate club (34 nodes, 4 communities; shipped inside PyG). One labelled node per
    community trains; all the other nodes are both the validation and the test nodes."""

    def load(self) -> Data:
        data = KarateClub()[0]
        data.val_mask = data.test_mask = ~data.train_mask
        return data


# -------------------------------------------------- graph classification
class TUDataModule(GraphsInComputeDtype, SplitDataModule):
    """TU Dortmund graph classification benchmarks (MUTAG, PROTEINS, ENZYMES...), mini-batched.

    Fold `fold` of a seeded stratified `num_folds`-fold split is the test set. `val_fraction`
    of the remaining graphs (stratified) validates; with `val_fraction: 0` the test fold is
    also the validation set: the protocol of Xu et al. (optimistic; see docs/graph.md).
    `num_folds` means what it means on every datamodule (litlab/data.py), but it defaults to 10
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
        check_fold(settings, key)
        name = str(settings["name"])
        raw = Path(str(settings["data_dir"])) / "TUDataset" / name / "raw"
        labels = raw / f"{name}_graph_labels.txt"
        try:
            found = np.loadtxt(labels, ndmin=1) if labels.is_file() else None
        except ValueError:  # not a label file: PyG's reading says so, in setup
            found = None
        check_labels(found, settings, key, name, "graphs")

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

    @property
    def dims(self) -> dict:
        """Also checks that every test fold gets a graph of each class (once the labels are
        read: data downloaded after the settings were checked)."""
        labels = self.dataset.y.view(-1).numpy()
        check_labels(labels, self.hparams, "data", self.hparams.name, "graphs")
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
