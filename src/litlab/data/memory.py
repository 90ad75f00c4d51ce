"""What a datamodule will hold in memory, checked against the machine before it allocates: a
setting that pads each image to a 60000 x 60000 canvas is refused in one line naming it, not
met as the kernel's OOM kill (or minutes of swapping) in the middle of reading the data."""

from litlab.errors import UserError

#: the share of this machine's memory a datamodule's arrays may take (the rest: the net, its
#: activations, the loader's batches, the other processes)
SHARE = 0.5


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
    fitting starts (`models.base.LitModule.on_fit_start`) for data with an image size."""
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
