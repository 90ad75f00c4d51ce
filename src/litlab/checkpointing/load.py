"""Loading checkpoints safely: `weights_only=True` always, and one clear line when a file is
missing, truncated, corrupt, not a litlab checkpoint, or holds entries of the wrong structure
(a state_dict that is not tensors, NaN weights, a stored config or provenance that is not a
mapping): every command that reads a checkpoint reads it here, so each is refused alike."""

from pathlib import Path

from litlab.checkpointing.run_config import CONFIG_KEY
from litlab.errors import UserError, one_line
from litlab.utils.files import check_regular


def load(path: str | Path, mmap: bool = False) -> dict:
    """The checkpoint dict (tensors on CPU); it must hold the run config that train.py stores.

    `mmap=True` reads the pickle and the zip directory; the tensors are paged in only as far
    as the finite-values check reads them."""
    import torch

    check_regular(path, f"ckpt_path={path}", "pass a .ckpt file")  # a pipe: never opened
    if not Path(path).is_file():
        raise UserError(f"ckpt_path={path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # zip errors, unpickling errors, EOF: all mean a bad file
        raise UserError(
            f"ckpt_path={path} cannot be loaded (truncated or corrupt?): {one_line(err)}"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or CONFIG_KEY not in ckpt:
        raise UserError(
            f"ckpt_path={path} is not a checkpoint written by litlab's train.py "
            f"(no '{CONFIG_KEY}' entry)"
        )
    check_entries(ckpt, str(path))
    return ckpt


def check_entries(ckpt: dict, source: str) -> None:
    """The entries litlab reads from a checkpoint have the structure train.py writes."""
    from litlab.checkpointing import moved, provenance, weights
    from litlab.checkpointing.trust import shown

    if not isinstance(ckpt[CONFIG_KEY], dict):
        raise UserError(
            f"ckpt_path={shown(source, 200)}: its stored config ('{CONFIG_KEY}') is a "
            f"{type(ckpt[CONFIG_KEY]).__name__}, not a mapping of the run's settings"
        )
    moved.renamed(ckpt[CONFIG_KEY])  # a checkpoint from before the domains' move: new names
    provenance.check_record(ckpt.get(provenance.KEY), source)
    weights.check_tensors(ckpt["state_dict"], source)
