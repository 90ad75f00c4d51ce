"""What every split-based datamodule shares: the loader settings, one loader recipe, four
Lightning hooks.

A subclass fills `train_set`, `val_set`, `test_set` in `setup`. `SplitDataModule.__init__` saves
the constructor arguments of the whole subclass chain as hparams; its own are the loader
settings (`batch_size`, `num_workers`, `persistent_workers`, `pin_memory`), which `loader` turns
into a `loader_class` (torch's DataLoader; PyG's for graphs). `setup` also fills `split_sources`:
each split's items named by their source, in the order of the split's dataset (a run's
data_split.json; eval.py's predictions.csv names its rows by them). Under DDP, Lightning adds the distributed sampler itself and
`litlab.utils.distributed` makes the val/test shards unpadded, so no sample counts twice.

What a datamodule will hold in memory, checked against the machine before it allocates: a
setting that pads each image to a 60000 x 60000 canvas is refused in one line naming it, not
met as the kernel's OOM kill (or minutes of swapping) in the middle of reading the data."""

import lightning as L
import torch
from torch.utils.data import DataLoader

from litlab.bounds import PosInt, Workers
from litlab.errors import UserError


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

    import torch

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
    import torch

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
