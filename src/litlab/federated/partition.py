"""Seeded client partitions of a training set: every sample in exactly one client.

`iid` deals a shuffled index evenly; `dirichlet` gives each class's samples to the clients in
proportions drawn from Dirichlet(alpha), the label skew of Hsu et al. (2019): small alpha means
few classes per client. Partitions are of dataset *items*, so graph datasets split into whole
graphs and 3D datasets into whole volumes. (flwr-datasets has the same partitioners, but only
for Hugging Face datasets.)
"""

import numpy as np

from litlab.errors import UserError

#: Dirichlet draws that leave a client with fewer samples are drawn again (up to MAX_DRAWS)
MIN_SAMPLES = 2
MAX_DRAWS = 1000


def iid(num_samples: int, num_clients: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(num_samples)
    return [np.sort(part) for part in np.array_split(order, num_clients)]


def dirichlet(labels: np.ndarray, num_clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """Label-skewed partition; redrawn until every client holds at least MIN_SAMPLES."""
    return dirichlet_shares(labels, num_clients, alpha, seed)[0]


def _split_by_shares(labels, shares: dict, num_clients: int, rng) -> list[list[int]]:
    parts = [[] for _ in range(num_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        share = shares.get(int(c), np.full(num_clients, 1 / num_clients))
        cuts = (np.cumsum(share)[:-1] * len(idx)).astype(int)
        for client, chunk in enumerate(np.split(idx, cuts)):
            parts[client].extend(chunk.tolist())
    return parts


def dirichlet_shares(labels: np.ndarray, num_clients: int, alpha: float, seed: int):
    """(parts, shares): the partition and each class's client shares that made it."""
    rng = np.random.default_rng(seed)
    need = min(MIN_SAMPLES, len(labels) // num_clients)
    for _ in range(MAX_DRAWS):
        shares = {}
        parts = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = shares[int(c)] = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(share)[:-1] * len(idx)).astype(int)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].extend(chunk.tolist())
        if min(len(p) for p in parts) >= need:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts], shares
    raise UserError(
        f"federate.alpha={alpha} leaves some of the {num_clients} clients with fewer "
        f"than {need} samples in {MAX_DRAWS} draws; use a larger alpha or fewer "
        "clients"
    )


def partition(
    labels: np.ndarray, num_clients: int, kind: str, alpha: float, seed: int
) -> list[np.ndarray]:
    """Index arrays into the training set, one per client (disjoint, together complete)."""
    if num_clients > len(labels):
        raise UserError(
            f"federate.num_clients={num_clients} is more than the {len(labels)} training samples"
        )
    if kind == "iid":
        return iid(len(labels), num_clients, seed)
    return dirichlet(np.asarray(labels), num_clients, alpha, seed)


def with_heldout(
    labels: np.ndarray, heldout: np.ndarray, num_clients: int, kind: str, alpha: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Training units partitioned as `partition` does, and held-out units dealt with the same
    per-class client shares (Dirichlet) or evenly (IID): each client's held-out part has its
    own label mix. A client may hold no held-out unit (it then does not evaluate)."""
    if num_clients > len(labels):
        raise UserError(
            f"federate.num_clients={num_clients} is more than the {len(labels)} training samples"
        )
    heldout = np.asarray(heldout)
    if kind == "iid":
        return iid(len(labels), num_clients, seed), iid(len(heldout), num_clients, seed + 1)
    parts, shares = dirichlet_shares(np.asarray(labels), num_clients, alpha, seed)
    rng = np.random.default_rng([seed, 1])
    held = _split_by_shares(heldout, shares, num_clients, rng)
    return parts, [np.sort(np.asarray(p, dtype=np.int64)) for p in held]


def class_counts(labels: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """(clients, classes) sample counts: the per-client class histogram."""
    num_classes = int(labels.max()) + 1
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
