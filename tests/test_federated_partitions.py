"""Federated partitions (litlab.federated.federation, the kinds' units: litlab.tasks.units): seeded, disjoint and complete,
label-skewed as alpha says, held-out parts with each client's label mix, and what a client
holds in every domain (items, whole volumes, induced node subgraphs)."""

import numpy as np
import pytest
import torch

import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)
from litlab.errors import UserError
from litlab.federated import federation as partition
from litlab.tasks import units


def _check_partition(parts, n):
    everything = np.concatenate(parts)
    assert len(everything) == n and len(np.unique(everything)) == n  # disjoint and complete
    assert sorted(everything.tolist()) == list(range(n))


@pytest.mark.parametrize("kind", ["iid", "dirichlet"])
def test_partitions_seeded_disjoint_complete(kind):
    labels = np.random.default_rng(0).integers(0, 10, 1293)
    parts = partition.partition(labels, 10, kind, alpha=0.5, seed=3)
    _check_partition(parts, len(labels))
    again = partition.partition(labels, 10, kind, alpha=0.5, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition.partition(labels, 10, kind, alpha=0.5, seed=4)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))
    assert min(len(p) for p in parts) >= partition.MIN_SAMPLES


def test_dirichlet_skew_follows_alpha():
    """Small alpha: each client is dominated by few classes; large alpha: close to IID."""
    labels = np.repeat(np.arange(10), 130)

    def classes_per_client(alpha):  # classes with at least 5 samples, mean over clients
        counts = partition.class_counts(
            labels, partition.partition(labels, 10, "dirichlet", alpha, seed=0)
        )
        return float(np.mean((counts >= 5).sum(1)))

    assert classes_per_client(0.1) < 5 < classes_per_client(1.0) < classes_per_client(100) == 10


def test_partition_items_of_each_domain(shared_data):
    """Digits images, phantom volumes and whole MUTAG graphs: labels read, items partitioned."""
    from litlab.domains.graph.data import TUDataModule
    from litlab.domains.medical3d.data import PhantomClassificationDataModule
    from litlab.domains.vision.data import DigitsDataModule

    phantoms = PhantomClassificationDataModule(num_volumes=24, size=12, size_jitter=0)
    mutag = TUDataModule(name="MUTAG", data_dir=str(shared_data("TUDataset/MUTAG").parents[1]))
    for dm in (DigitsDataModule(), phantoms, mutag):
        dm.setup("fit")
        labels = units.labels_of(dm.train_set)
        truth = [
            int(item[1]) if isinstance(item, (tuple, list)) else int(item.y)
            for item in dm.train_set
        ]
        assert labels.tolist() == truth
        parts = partition.partition(labels, 4, "dirichlet", alpha=1.0, seed=0)
        _check_partition(parts, len(dm.train_set))


def test_too_many_clients_is_one_line():
    with pytest.raises(UserError, match="more than the 5 training samples"):
        partition.partition(np.zeros(5, int), 6, "iid", 1.0, 0)


def test_heldout_units_follow_each_clients_label_mix():
    """Dirichlet: a client's held-out part has its training part's label mix (same shares)."""
    rng = np.random.default_rng(0)
    train, held = rng.integers(0, 4, 2000), rng.integers(0, 4, 1000)
    parts, heldout = partition.with_heldout(train, held, 5, "dirichlet", 0.3, seed=1)
    _check_partition(parts, len(train))
    _check_partition(heldout, len(held))
    mix = partition.class_counts(train, parts) / np.array([[len(p)] for p in parts])
    held_mix = partition.class_counts(held, heldout) / np.array([[max(1, len(p))] for p in heldout])
    assert np.abs(mix - held_mix).max() < 0.15  # same proportions, up to sampling
    _iid_parts, iid_held = partition.with_heldout(train, held, 5, "iid", 0.3, seed=1)
    assert [len(p) for p in iid_held] == [200] * 5


def test_node_clients_are_induced_subgraphs():
    """Node classification: every node in one client, edges only inside a client, each
    client's training nodes its share of the graph's, its test nodes its validation nodes."""
    from litlab import tasks
    from litlab.domains.graph.data import SBMDataModule

    dm = SBMDataModule(nodes_per_class=60, train_per_class=10, num_val=60, num_test=100)
    kind = tasks.of(dm)
    full = kind.units.originals(dm)
    train_labels, other_labels = kind.federated_labels(dm)
    assert len(train_labels) == 40 and len(other_labels) == 200
    parts, held = partition.with_heldout(train_labels, other_labels, 3, "dirichlet", 0.5, 0)
    seen, train_seen, edges = 0, 0, 0
    for c in range(3):
        kind.units.narrow(dm, full, parts[c], held[c])
        sub = dm.data
        assert sub.num_nodes == len(parts[c]) + len(held[c])
        assert int(sub.train_mask.sum()) == len(parts[c]) == kind.units.train_count(dm)
        assert torch.equal(sub.test_mask, sub.val_mask)
        assert int(sub.edge_index.max()) < sub.num_nodes
        seen, train_seen, edges = (
            seen + sub.num_nodes,
            train_seen + len(parts[c]),
            (edges + sub.edge_index.shape[1]),
        )
    g = full["data"]
    assert seen == g.num_nodes and train_seen == int(g.train_mask.sum())
    assert edges < g.edge_index.shape[1]  # the edges between clients are gone


def test_volume_clients_hold_whole_volumes_labelled_by_their_dominant_structure():
    from litlab import tasks
    from litlab.domains.medical3d.data import PhantomSegmentationDataModule

    label = np.zeros((4, 4, 4), np.uint8)
    label[:2] = 2
    label[0, 0, 0] = 1
    assert units.dominant_structure(label) == 2
    assert units.dominant_structure(np.zeros((2, 2), np.uint8)) == 0
    dm = PhantomSegmentationDataModule(
        num_volumes=16, size=16, size_jitter=0, patch_size=(16, 16, 16)
    )
    dm.setup("fit")
    kind = tasks.of(dm)
    full = kind.units.originals(dm)
    train_labels, held_labels = kind.federated_labels(dm)
    assert len(train_labels) == len(full["train_set"].volumes)
    parts, held = partition.with_heldout(train_labels, held_labels, 2, "iid", 1.0, 0)
    kind.units.narrow(dm, full, parts[1], held[1])
    assert dm.train_set.volumes == [full["train_set"].volumes[i] for i in parts[1]]
    assert len(dm.train_set) == len(parts[1]) * dm.samples_per_volume  # patches of its volumes
    assert kind.units.heldout_count(dm) == len(held[1])
