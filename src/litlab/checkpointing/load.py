"""Loading checkpoints safely: `weights_only=True` always, and one clear line when a file is
missing, truncated, corrupt, or not a litlab checkpoint."""

from pathlib import Path

from litlab.checkpointing.run_config import CONFIG_KEY
from litlab.errors import UserError, one_line


def load(path: str | Path, mmap: bool = False) -> dict:
    """The checkpoint dict (tensors on CPU); it must hold the run config that train.py stores.

    `mmap=True` reads the pickle and the zip directory but not the tensors (a quick check)."""
    import torch

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
    return ckpt
