"""Loading checkpoints safely: `weights_only=True` always, and one clear line when a file is
missing, truncated, corrupt, or not a litlab checkpoint."""
from pathlib import Path

from litlab.callbacks.run_config import CONFIG_KEY
from litlab.utils.cli import UserError


def load(path: str | Path) -> dict:
    """The checkpoint dict (tensors on CPU); it must hold the run config that train.py stores."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # zip errors, unpickling errors, EOF: all mean a bad file
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot load checkpoint {path} (truncated or corrupt?): {reason}") from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or CONFIG_KEY not in ckpt:
        raise UserError(f"{path} is not a checkpoint written by litlab's train.py "
                        f"(no '{CONFIG_KEY}' entry)")
    return ckpt
