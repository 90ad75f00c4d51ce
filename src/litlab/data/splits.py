"""Seeded, stratified index splits shared by the domains' datamodules."""

import json
import logging
from pathlib import Path

import numpy as np

from litlab.errors import UserError


def stratified_split(
    labels, fraction: float, seed: int, key: str = "split fraction", pool: str = "samples"
) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (rest, held_out) with `fraction` held out, class proportions kept.

    Falls back to a plain random split when the data is too small to stratify (a class with
    one sample, or fewer held-out samples than classes). A fraction that leaves one side
    empty is bad input: one line naming `key` (the config key of the fraction) and `pool`
    (which samples it splits).
    """
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels)
    index = np.arange(len(labels))
    held = int(np.ceil(fraction * len(labels)))
    if not 0.0 < fraction < 1.0 or not 0 < held < len(labels):
        raise UserError(
            f"{key}={fraction} splits {len(labels)} {pool} into {len(labels) - held} and "
            f"{held}: both parts need at least one sample (choose a fraction nearer 0.5)"
        )
    _, counts = np.unique(labels, return_counts=True)
    thin = min(held, len(labels) - held) < len(counts)  # fewer samples on a side than classes
    if thin:
        logging.getLogger(__name__).warning(
            "a split fraction of %s leaves %d of %d samples on one side, fewer than the %d "
            "classes: its metrics will be noisy (choose a fraction nearer 0.5)",
            fraction,
            min(held, len(labels) - held),
            len(labels),
            len(counts),
        )
    small = counts.min() < 2 or thin
    stratify = None if small else labels
    rest, held = train_test_split(index, test_size=fraction, random_state=seed, stratify=stratify)
    return np.sort(rest), np.sort(held)


def stratified_folds(labels, num_folds: int, fold: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) of fold `fold` (0-based) of a seeded stratified k-fold split."""
    from sklearn.model_selection import StratifiedKFold

    if not 0 <= fold < num_folds:
        raise ValueError(f"fold must be in [0, {num_folds}), got {fold}")
    splitter = StratifiedKFold(n_splits=num_folds, shuffle=True, random_state=seed)
    train, test = list(splitter.split(np.zeros(len(labels)), np.asarray(labels)))[fold]
    return train, test


def split_indices(
    n: int, val_fraction: float, test_fraction: float, seed: int, pool: str = "volumes"
) -> dict:
    """Seeded random train/val/test split of n items (each split gets at least one); `pool`
    says what the items are."""
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, round(n * test_fraction))
    n_val = max(1, round(n * val_fraction))
    if n_test + n_val >= n:
        raise UserError(
            f"{n} {pool} are too few for val_fraction={val_fraction} and "
            f"test_fraction={test_fraction}"
        )
    return {
        "train": sorted(order[n_test + n_val :].tolist()),
        "val": sorted(order[n_test : n_test + n_val].tolist()),
        "test": sorted(order[:n_test].tolist()),
    }


def write_split(path: Path, sources: dict[str, list]) -> None:
    """A run's data_split.json: {split: [source of each item]} (a datamodule's
    `split_sources`), written whole or not at all."""

    def plain(source):  # numpy and torch integers as JSON integers; names as they are
        return source.item() if hasattr(source, "item") else source

    text = json.dumps({k: [plain(s) for s in v] for k, v in sources.items()}, indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text)
    tmp.replace(path)
