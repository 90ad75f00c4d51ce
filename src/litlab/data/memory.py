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
