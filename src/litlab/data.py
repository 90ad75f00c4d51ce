"""What every domain's datamodules share (the domains' own are in litlab.domains): the
split-and-load base (`SplitDataModule`), the memory checks, seeded splits and k-fold.

A subclass fills `train_set`, `val_set`, `test_set` in `setup`, and `split_sources`: each
split's items named by their source, in the order of the split's dataset (a run's
data_split.json; eval.py's predictions.csv names its rows by them). `__init__` saves the
constructor arguments of the whole subclass chain as hparams; `loader` turns the loader
settings into a `loader_class` (torch's DataLoader; PyG's for graphs). Under DDP, Lightning adds
the distributed sampler itself and `litlab.utils.distributed` makes the val/test shards
unpadded, so no sample counts twice.

What a datamodule will hold in memory is checked against the machine before it allocates: a
setting that pads each image to a 60000 x 60000 canvas is refused in one line naming it, not
met as the kernel's OOM kill (or minutes of swapping) in the middle of reading the data.

k-fold cross-validation, the same on every domain: `num_folds=K fold=i` makes fold i of a
seeded stratified K-fold split the test set and carves the validation set from the other folds.
Fold membership is a function of (seed, K, the items' labels in their stored order) only, so the
K runs of `-m data.num_folds=K 'data.fold=range(K)'` see disjoint test folds that cover every
item once. The checks here run twice: from the datamodules' `check_settings` (before anything is
written, for every job of a sweep, with labels when they can be read cheaply) and again from
`setup` with the labels actually read (data that had to be downloaded first)."""

import json
import logging
from pathlib import Path
from typing import Annotated

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from litlab.bounds import Ge, PosInt, Workers
from litlab.errors import UserError
from litlab.tasks.units import dominant_structure


class SplitDataModule(L.LightningDataModule):
    #: the split `predict_dataloader` serves (eval.py sets it to "test" or "val")
    predict_split = "test"
    loader_class = DataLoader
    #: the predictions.csv column of an item's source (`row`, `image`, `sample`, ...)
    source_column = "sample"

    #: {split: [source of each item]} once set up, e.g. {"train": [0, 3, ...], ...}
    split_sources: dict[str, list] | None = None

    def check_training_step(self, net, device) -> None:
        """Called as fitting starts (`LitModule.on_fit_start`): data whose item size the user
        sets (`data.image_size`) checks that one training step of `net` fits on `device`
        (`check_step_memory`); data of fixed sizes has nothing to check."""

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


def compute_dtype(trainer) -> torch.dtype | None:
    """The dtype the model's weights hold when it is not float32 (`bf16-true`, `16-true`,
    `64-true`: Lightning casts the module), else None (32-true and the mixed precisions, where
    autocast casts inside each op and a batch stays float32)."""
    module = None if trainer is None else trainer.lightning_module
    if module is None or module.dtype == torch.float32:
        return None
    return module.dtype


def in_compute_dtype(trainer, batch):
    """`batch` with its float tensors in the weights' dtype (`compute_dtype`), as Lightning's
    precision plugin casts them (`convert_input`).

    Lightning casts a batch before the transfer hooks, so what a hook makes float on the device
    (uint8 images scaled to [0, 1], normalized with float32 statistics) would reach bf16
    weights as float32 and fail in the first layer: each such hook returns its batch through
    this."""
    if compute_dtype(trainer) is None:
        return batch
    return trainer.precision_plugin.convert_input(batch)


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


#: a training step's memory per byte of the activations autograd keeps (measured on the 2D
#: U-Net on CPU: gradients, the loss's one-hot scores, the allocator's temporaries)
STEP_FACTOR = 2.5


def saved_bytes(net, shape: tuple) -> int | None:
    """Bytes of the activations a training forward of `net` on an input of `shape` keeps for
    the backward pass, counted on the meta device (nothing is allocated); None when the net
    cannot run there."""
    import copy

    from litlab.compat.torch import drop_hooks

    total = [0]

    def pack(tensor):
        total[0] += tensor.numel() * tensor.element_size()
        return tensor

    try:
        memo = {  # the copy's weights are made on the meta device: nothing is copied
            id(t): torch.nn.Parameter(torch.empty_like(t, device="meta"), t.requires_grad)
            for t in net.parameters()
        }
        memo |= {id(b): torch.empty_like(b, device="meta") for b in net.buffers()}
        meta = copy.deepcopy(net, memo).train()
        drop_hooks(meta)  # the original's (the first-forward watch) never run for the copy
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = meta(torch.empty(shape, device="meta"))
    except Exception:  # noqa: BLE001  (an op without a meta kernel: not checked here)
        return None
    return total[0] + sum(o.numel() * o.element_size() for o in _tensors(out))


def _tensors(out) -> list:
    if hasattr(out, "numel"):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def check_step_memory(net, dm, device) -> None:
    """One line when a training batch of `data.batch_size` images of `data.image_size` needs
    more memory than the device has (a side of 4096 passes every bound, then a U-Net's first
    step is OOM-killed: hundreds of GiB of activations), naming both settings; called as
    fitting starts (`SplitDataModule.check_training_step`) for data with an image size."""
    given, side = int(dm.hparams.batch_size), int(dm.image_size)
    train = getattr(dm, "train_set", None)
    batch = min(given, len(train)) if train is not None and len(train) else given
    kept = saved_bytes(net, (1, int(getattr(dm, "channels", 1)), side, side))
    if kept is None:
        return
    need = STEP_FACTOR * kept * batch
    if device.type == "cuda":
        have, where = torch.cuda.get_device_properties(device).total_memory, str(device)
    else:
        import psutil

        have, where = psutil.virtual_memory().total, "this machine"
    if need <= 0.9 * have:
        return
    largest = max((max(s) for s in getattr(dm, "shapes", None) or []), default=None)
    holds = f" (the largest item is {largest} pixels)" if largest else ""
    raise UserError(
        f"a training batch of {batch} images (data.batch_size={given}) of data.image_size="
        f"{side} needs about {gib(need)} for one training step of model.net, more than "
        f"{where}'s {gib(have)}; lower data.image_size{holds} or data.batch_size"
    )


# ---------------------------------------------------------------- splits
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
    # numpy and torch integers (and arrays of them) as JSON integers; names as they are
    text = json.dumps(sources, indent=1, default=lambda value: value.tolist())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text)
    tmp.replace(path)


# ----------------------------------------------------------------- folds
#: `null` keeps a datamodule's own split; an integer K >= 2 asks for K-fold cross-validation
NumFolds = Annotated[int | None, Ge(2), "null (the usual split) or an integer >= 2"]


def check_fold(settings: dict, key: str) -> None:
    """`fold` names one of the `num_folds` folds; a fold without k-fold is a mistake, not 0."""
    folds, fold = settings.get("num_folds"), settings.get("fold", 0)
    if folds is None:
        if fold:
            raise UserError(
                f"{key}.fold={fold} needs k-fold cross-validation: set {key}.num_folds to an "
                f"integer > {fold} (e.g. {key}.num_folds=5), or leave {key}.fold=0"
            )
        return
    if not 0 <= fold < folds:
        raise UserError(
            f"{key}.fold={fold} is not valid; choose 0 to {folds - 1} ({key}.num_folds={folds})"
        )


def check_labels(labels, settings: dict, key: str, what: str, pool: str = "samples") -> None:
    """Every test fold needs an item of each class: num_folds <= the smallest class."""
    folds = settings.get("num_folds")
    if folds is None or labels is None:
        return
    labels = np.asarray(labels).reshape(-1)
    smallest = int(np.unique(labels, return_counts=True)[1].min()) if len(labels) else 0
    if folds > smallest:
        use = f"use 2 to {smallest}" if smallest >= 2 else "k-fold is not possible"
        raise UserError(
            f"{key}.num_folds={folds} is too many for {what} ({len(labels)} {pool}, "
            f"smallest class {smallest}); {use}"
        )


def check_count(count: int, settings: dict, key: str, what: str, pool: str) -> None:
    """Outside each test fold, at least 2 items are left: one to train on, one to validate."""
    folds = settings.get("num_folds")
    if folds is None:
        return

    def leaves_two(k: int) -> bool:  # the largest test fold has ceil(count / k) items
        return count - -(-count // k) >= 2

    if folds > count or not leaves_two(folds):
        good = [k for k in range(2, count + 1) if leaves_two(k)]
        valid = f"use 2 to {max(good)}" if good else "too few for any k-fold split"
        raise UserError(
            f"{key}.num_folds={folds} is too many for {what} ({count} {pool}): each test fold "
            f"must leave 2 {pool} to train and validate on; {valid}"
        )


def fold_split(
    labels, num_folds: int, fold: int, seed: int, val_fraction: float, pool: str = "samples"
) -> dict[str, np.ndarray]:
    """Indices {train, val, test}: fold `fold` tests; `val_fraction` of the other folds
    (stratified) validates; the rest trains."""
    labels = np.asarray(labels).reshape(-1)
    rest, test = stratified_folds(labels, num_folds, fold, seed)
    fit, val = stratified_split(
        labels[rest], val_fraction, seed, "data.val_fraction", f"{pool} outside the test fold"
    )
    return {"train": np.sort(rest[fit]), "val": np.sort(rest[val]), "test": np.sort(test)}


def settings_split(labels, h, what: str, pool: str) -> dict[str, np.ndarray]:
    """`fold_split` by a datamodule's hparams, once the labels are read (data downloaded after
    the settings were checked is checked here)."""
    check_labels(labels, h, "data", what, pool)
    return fold_split(labels, h.num_folds, h.fold, h.seed, h.val_fraction, pool)


def volume_split(label_maps, h, what: str) -> dict[str, list[int]]:
    """Segmentation volumes by fold, stratified by their dominant structures."""
    check_count(len(label_maps), h, "data", what, "volumes")
    strata = pooled_strata([dominant_structure(m) for m in label_maps], h.num_folds)
    split = fold_split(strata, h.num_folds, h.fold, h.seed, h.val_fraction, "volumes")
    return {k: v.tolist() for k, v in split.items()}


def pooled_strata(strata, num_folds: int) -> np.ndarray:
    """Strata with fewer members than folds cannot be spread over every fold: they join the
    most common stratum (volumes are never refused for an unusual structure)."""
    strata = np.asarray(strata).reshape(-1)
    values, counts = np.unique(strata, return_counts=True)
    common = values[counts.argmax()]
    rare = values[counts < num_folds]
    return np.where(np.isin(strata, rare), common, strata)


class FoldSettings:
    """The k-fold checks of a datamodule, before anything is written: `config.validate` calls
    `check_settings` (through the targets' hook). A subclass tells what it knows without work:
    `fold_count` (items) and `fold_labels` (their classes), None when only `setup` can tell."""

    data_name = "the data"  # how error lines name it
    fold_pool = "samples"  # what its items are

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        cls.check_folds(settings, key, cls.fold_count(settings))

    @classmethod
    def check_folds(cls, settings: dict, key: str, count: int | None) -> None:
        check_fold(settings, key)
        if settings.get("num_folds") is None:
            return
        if count is not None:
            check_count(count, settings, key, cls.data_name, cls.fold_pool)
        check_labels(cls.fold_labels(settings), settings, key, cls.data_name, cls.fold_pool)

    @classmethod
    def fold_count(cls, settings: dict) -> int | None:
        return None

    @classmethod
    def fold_labels(cls, settings: dict) -> list | None:
        return None
