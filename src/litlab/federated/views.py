"""What a federated client sees of a datamodule: the units its data is partitioned in (what
its task kind declares, `TaskKind.federated_units`), the label each unit is partitioned by, and
the client's own view.

| units | kinds | label of a unit | client trains on | client evaluates on |
| --- | --- | --- | --- | --- |
| items | image, volume, graph classification; regression | its class (a value: its quantile of the training values) | its training items (images, volumes, graphs, rows) | its share of the validation items |
| volumes | volume segmentation | its dominant foreground structure (most voxels; 0 if none) | patches of its volumes | its share of the validation volumes |
| nodes | node classification | its class | its subgraph's training nodes | its subgraph's validation nodes |

Nodes (FedGCN-style subgraph clients): every node of the graph belongs to one client, edges
between two clients are dropped, each client holds its induced subgraph. Training nodes are
partitioned (label-skewed under Dirichlet); every other node follows the same per-class shares,
so a client's validation nodes have its own label mix.

`UNITS` is the one table of how partitions read labels and how a datamodule is narrowed to a
client, by unit.
"""

import copy

import numpy as np

from litlab import tasks
from litlab.data.folds import dominant_structure  # the same stratum k-fold splits volumes by
from litlab.federated.partition import labels_of


class Items:
    """Dataset items (images, volumes, graphs, rows), each partitioned by its class. A client
    evaluates on its share of the validation items, through trainer.test."""

    def labels(self, dm) -> tuple[np.ndarray, np.ndarray]:
        """Their classes; values (regression) by the kind's output family's strata."""
        family = tasks.of(dm).output_family()
        return family.strata(labels_of(dm.train_set), labels_of(dm.val_set))

    def originals(self, dm) -> dict:
        return {"train_set": dm.train_set, "val_set": dm.val_set}

    def narrow(self, dm, full: dict, train_units: list[int], heldout_units: list[int]) -> None:
        from torch.utils.data import Subset

        dm.train_set = Subset(full["train_set"], train_units)
        dm.test_set = Subset(full["val_set"], heldout_units)

    def train_count(self, dm) -> int:
        return len(dm.train_set)

    def heldout_count(self, dm) -> int:
        return len(dm.test_set)


class Volumes(Items):
    """Whole labelled volumes, each partitioned by its dominant structure; the datamodule
    draws its training patches from the client's volumes only."""

    def labels(self, dm) -> tuple[np.ndarray, np.ndarray]:
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
        return len(dm.train_set.volumes)

    def heldout_count(self, dm) -> int:
        return len(dm.test_set.volumes)


class Nodes:
    """The nodes of one graph, each partitioned by its class: the training nodes first, then
    every other node (in node order); a client holds the subgraph of its nodes."""

    def labels(self, dm) -> tuple[np.ndarray, np.ndarray]:
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


#: `TaskKind.federated_units` -> how such units are labelled and dealt out
UNITS = {"items": Items(), "volumes": Volumes(), "nodes": Nodes()}


def units_of(dm):
    """The units of a datamodule's task kind; a kind without any is refused in one line."""
    kind = tasks.get(getattr(dm, "kind", None))
    kind.refuse_federated()
    return UNITS[kind.federated_units]


def unit_labels(dm) -> tuple[np.ndarray, np.ndarray]:
    """(training units' labels, held-out units' labels) of a set-up datamodule."""
    return units_of(dm).labels(dm)


def originals(dm) -> dict:
    """The datamodule's own sets, captured once: every client's view narrows these."""
    return units_of(dm).originals(dm)


def client_view(dm, full: dict, train_units: list[int], heldout_units: list[int]) -> None:
    """Narrow `dm` (a client's own copy) to one client: `full` holds the datamodule's own
    sets, captured once by `originals`."""
    units_of(dm).narrow(dm, full, train_units, heldout_units)


def client_count(dm) -> int:
    """Units a client trains on, for FedAvg's weights (nodes: its training nodes)."""
    return units_of(dm).train_count(dm)


def heldout_count(dm) -> int:
    return units_of(dm).heldout_count(dm)


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
