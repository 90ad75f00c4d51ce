"""What a federated client sees of a datamodule: the units its data is dealt out in (what its
kind declares, `Kind.units`), the label each unit is partitioned by, and the client's own view.

| units | kinds | label of a unit | client trains on | client evaluates on |
| --- | --- | --- | --- | --- |
| items | image, volume, graph, signal classification; regression; 2D segmentation | its class (a value: its quantile of the training values; a mask: its dominant structure) | its training items | its share of the validation items |
| volumes | volume segmentation | its dominant foreground structure (most voxels; 0 if none) | patches of its volumes | its share of the validation volumes |
| nodes | node classification | its class | its subgraph's training nodes | its subgraph's validation nodes |

Nodes (FedGCN-style subgraph clients): every node of the graph belongs to one client, edges
between two clients are dropped, each client holds its induced subgraph. Training nodes are
partitioned (label-skewed under Dirichlet); every other node follows the same per-class shares,
so a client's validation nodes have its own label mix. numpy and torch are imported where
used: the kinds' declarations stay light.
"""

import copy


def labels_of(dataset):
    """The labels of a dataset's items (tensor datasets, PyG datasets, Subsets): a class or
    value per item, or a label map per item (2D segmentation; its kind's strata read it)."""
    import numpy as np
    import torch
    from torch.utils.data import Subset, TensorDataset

    if isinstance(dataset, Subset):
        return labels_of(dataset.dataset)[np.asarray(dataset.indices)]
    if hasattr(dataset, "labels"):  # litlab's TensorImages
        return np.asarray(dataset.labels).reshape(-1)
    if isinstance(dataset, TensorDataset):  # label maps stay one per item
        labels = dataset.tensors[-1].numpy()
        return labels if labels.ndim > 2 else labels.reshape(-1)
    if hasattr(dataset, "y") and dataset.y is not None:  # PyG InMemoryDataset: one label a graph
        return dataset.y.numpy().reshape(-1)
    return np.asarray(
        [int(torch.as_tensor(item[1] if isinstance(item, tuple) else item.y)) for item in dataset]
    )


def dominant_structure(label_map) -> int:
    """The foreground class with the most voxels (0 when there is none): a segmentation
    volume's stratum (federated partitions, k-fold splits)."""
    import numpy as np

    counts = np.bincount(np.asarray(label_map, dtype=np.int64).reshape(-1))
    return int(counts[1:].argmax() + 1) if len(counts) > 1 and counts[1:].any() else 0


class ItemUnits:
    """Dataset items (images, volumes, graphs, rows, sequences), each partitioned by its
    class. A client evaluates on its share of the validation items, through trainer.test."""

    def labels(self, dm) -> tuple:
        return labels_of(dm.train_set), labels_of(dm.val_set)

    def originals(self, dm) -> dict:
        """The datamodule's own sets, captured once: every client's view narrows these."""
        return {"train_set": dm.train_set, "val_set": dm.val_set}

    def narrow(self, dm, full: dict, train_units: list[int], heldout_units: list[int]) -> None:
        """Narrow `dm` (a client's own copy) to one client's units of `full` (`originals`)."""
        from torch.utils.data import Subset

        dm.train_set = Subset(full["train_set"], train_units)
        dm.test_set = Subset(full["val_set"], heldout_units)

    def train_count(self, dm) -> int:
        """Units a client trains on, for FedAvg's weights (nodes: its training nodes)."""
        return len(dm.train_set)

    def heldout_count(self, dm) -> int:
        return len(dm.test_set)


class VolumeUnits(ItemUnits):
    """Whole labelled volumes, each partitioned by its dominant structure; the datamodule
    draws its training patches from the client's volumes only."""

    def labels(self, dm) -> tuple:
        import numpy as np

        return (
            np.asarray([dominant_structure(v["label"]) for v in dm.train_set.volumes]),
            np.asarray([dominant_structure(v["label"]) for v in dm.val_set.volumes]),
        )

    def narrow(self, dm, full: dict, train_units: list[int], heldout_units: list[int]) -> None:
        train = copy.copy(full["train_set"])
        train.volumes = [full["train_set"].volumes[i] for i in train_units]
        heldout = copy.copy(full["val_set"])
        heldout.volumes = [full["val_set"].volumes[i] for i in heldout_units]
        dm.train_set, dm.test_set = train, heldout

    def train_count(self, dm) -> int:
        return len(dm.train_set.volumes)  # not its patches


class NodeUnits:
    """The nodes of one graph, each partitioned by its class: the training nodes first, then
    every other node (in node order); a client holds the subgraph of its nodes."""

    def labels(self, dm) -> tuple:
        y = dm.data.y.numpy().reshape(-1)
        train = dm.data.train_mask.numpy()
        return y[train], y[~train]

    def originals(self, dm) -> dict:
        return {"data": dm.data}

    def narrow(self, dm, full: dict, train_units: list[int], heldout_units: list[int]) -> None:
        dm.__dict__["data"] = _subgraph(full["data"], train_units, heldout_units)

    def train_count(self, dm) -> int:
        return int(dm.data.train_mask.sum())

    def heldout_count(self, dm) -> int:
        return int(dm.data.test_mask.sum())


def _subgraph(data, train_units: list[int], heldout_units: list[int]):
    """The subgraph induced by the client's nodes: its training nodes (indices among the
    training nodes) and its other nodes (indices among the rest); edges to other clients go.
    Its `test_mask` is its validation nodes: the client evaluates with trainer.test."""
    import torch

    train_nodes = data.train_mask.nonzero().view(-1)
    other_nodes = (~data.train_mask).nonzero().view(-1)
    nodes = torch.cat([train_nodes[train_units], other_nodes[heldout_units]]).sort().values
    sub = data.subgraph(nodes)
    sub.test_mask = sub.val_mask.clone()
    return sub
