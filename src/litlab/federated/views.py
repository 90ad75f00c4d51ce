"""What a federated client sees of a datamodule, for each task kind: the units its data is
partitioned in, the label each unit is partitioned by, and the client's own view.

| task kind | unit (partitioned) | label of a unit | client trains on | client evaluates on |
| --- | --- | --- | --- | --- |
| image, volume, graph classification | an item (image, volume, graph) | its class | its training items | its share of the validation items |
| volume segmentation | a whole volume | its dominant foreground structure (most voxels; 0 if none) | patches of its volumes | its share of the validation volumes |
| node classification | a node | its class | its subgraph's training nodes | its subgraph's validation nodes |

Node classification (FedGCN-style subgraph clients): every node of the graph belongs to one
client, edges between two clients are dropped, each client holds its induced subgraph.
Training nodes are partitioned (label-skewed under Dirichlet); every other node follows the
same per-class shares, so a client's validation nodes have its own label mix.

`UNIT_LABELS` is the one table of how partitions read labels; `client_view` the one place a
datamodule is narrowed to a client.
"""

import copy

import numpy as np

from litlab.errors import UserError
from litlab.federated.partition import labels_of
from litlab.tasks import (
    GRAPH_CLASSIFICATION,
    IMAGE_CLASSIFICATION,
    NODE_CLASSIFICATION,
    VOLUME_CLASSIFICATION,
    VOLUME_SEGMENTATION,
)


def _item_labels(dm) -> tuple[np.ndarray, np.ndarray]:
    return labels_of(dm.train_set), labels_of(dm.val_set)


def dominant_structure(label: np.ndarray) -> int:
    """The foreground class with the most voxels (1, 2, ...), 0 for a volume without any."""
    counts = np.bincount(np.asarray(label).ravel().astype(np.int64))
    return int(counts[1:].argmax()) + 1 if counts[1:].sum() > 0 else 0


def _volume_labels(dm) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.asarray([dominant_structure(v["label"]) for v in dm.train_set.volumes]),
        np.asarray([dominant_structure(v["label"]) for v in dm.val_set.volumes]),
    )


def _node_labels(dm) -> tuple[np.ndarray, np.ndarray]:
    """Labels of the training nodes, then of every other node (in node order)."""
    y = dm.data.y.numpy().reshape(-1)
    train = dm.data.train_mask.numpy()
    return y[train], y[~train]


#: task kind -> (labels of the training units, labels of the held-out units)
UNIT_LABELS = {
    IMAGE_CLASSIFICATION: _item_labels,
    VOLUME_CLASSIFICATION: _item_labels,
    GRAPH_CLASSIFICATION: _item_labels,
    VOLUME_SEGMENTATION: _volume_labels,
    NODE_CLASSIFICATION: _node_labels,
}


def unit_labels(dm) -> tuple[np.ndarray, np.ndarray]:
    """(training units' labels, held-out units' labels) of a set-up datamodule."""
    task = getattr(dm, "task", None)
    if task not in UNIT_LABELS:
        raise UserError(
            f"federated runs partition {', '.join(UNIT_LABELS)} data; this datamodule's task "
            f"is {task}"
        )
    return UNIT_LABELS[task](dm)


def client_view(dm, full: dict, train_units: list[int], heldout_units: list[int]) -> None:
    """Narrow `dm` (a client's own copy) to one client: `full` holds the datamodule's own
    sets, captured once by `originals`."""
    from torch.utils.data import Subset

    if dm.task == NODE_CLASSIFICATION:
        dm.__dict__["data"] = _subgraph(full["data"], train_units, heldout_units)
        return
    if dm.task == VOLUME_SEGMENTATION:
        train = copy.copy(full["train_set"])
        train.volumes = [full["train_set"].volumes[i] for i in train_units]
        heldout = copy.copy(full["val_set"])
        heldout.volumes = [full["val_set"].volumes[i] for i in heldout_units]
        dm.train_set, dm.test_set = train, heldout
        return
    dm.train_set = Subset(full["train_set"], train_units)
    dm.test_set = Subset(full["val_set"], heldout_units)  # client evaluation = trainer.test


def originals(dm) -> dict:
    if dm.task == NODE_CLASSIFICATION:
        return {"data": dm.data}
    return {"train_set": dm.train_set, "val_set": dm.val_set}


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


def client_count(dm) -> int:
    """Items a client trains on, for FedAvg's weights (nodes: its training nodes)."""
    if dm.task == NODE_CLASSIFICATION:
        return int(dm.data.train_mask.sum())
    if dm.task == VOLUME_SEGMENTATION:
        return len(dm.train_set.volumes)
    return len(dm.train_set)


def heldout_count(dm) -> int:
    if dm.task == NODE_CLASSIFICATION:
        return int(dm.data.test_mask.sum())
    if dm.task == VOLUME_SEGMENTATION:
        return len(dm.test_set.volumes)
    return len(dm.test_set)
