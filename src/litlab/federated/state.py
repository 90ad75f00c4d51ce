"""A federated run's state on disk, after every round, and its resume.

After each round the run dir gets, atomically (temp file, fsync, rename):
- `checkpoints/last.ckpt`: a Lightning checkpoint of the global model with the run config
  (as train.py's) and, under `STATE_KEY`, what resuming needs: the last finished round, the
  history so far, the partitions' digest and the driver's RNG states;
- `global.ckpt`: the same file (a hard link: no second copy);
- `history.csv` / `history.png` (`outputs.write_history`).
`ckpt_path=last|<run dir>` reads `checkpoints/last.ckpt` back with `weights_only=True` and
continues at the next round. Client sampling and client seeds are functions of (seed, round),
the partitions of (seed, data), so with the RNG states restored the resumed rounds run as
they would have without the stop.
"""

import hashlib
import os
import random
from pathlib import Path

import numpy as np

from litlab.errors import UserError

STATE_KEY = "litlab_federated"
#: keys of the run config that may differ on resume: they do not change what is computed
FREE_KEYS = ("paths", "hydra", "extras", "ckpt_path", "tags", "task_name", "threads")
FREE_FEDERATE_KEYS = ("verbose", "backend")


def digest(parts: list[list[int]]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(np.asarray(p, dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()


def rng_state() -> dict:
    """Python's, numpy's and torch's global RNG states, as tensors and plain values."""
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict) -> None:
    import torch

    random.setstate(_tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def save(trainer, run_dir: Path, state: dict) -> Path:
    """checkpoints/last.ckpt and global.ckpt of the model the trainer last tested."""
    from litlab.checkpointing.atomic_io import AtomicCheckpointIO

    checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
    checkpoint[STATE_KEY] = state
    last = run_dir / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(checkpoint, last)
    glob = run_dir / "global.ckpt"
    tmp = run_dir / ".global.ckpt.link"
    tmp.unlink(missing_ok=True)
    try:
        os.link(last, tmp)
    except OSError:  # file systems without hard links: a copy
        import shutil

        shutil.copyfile(last, tmp)
    os.replace(tmp, glob)
    return glob


def load(path: Path) -> tuple[dict, dict]:
    """(checkpoint, federated state) of a run to resume; one line when it is not one."""
    from litlab.checkpointing.load import load as load_checkpoint

    ckpt = load_checkpoint(path)
    state = ckpt.get(STATE_KEY)
    if not isinstance(state, dict) or not isinstance(state.get("round"), int):
        raise UserError(f"ckpt_path={path} is not a federated run's checkpoint (no round state)")
    return ckpt, state


def check_same_run(stored: dict, current: dict, run_dir: Path) -> None:
    """Resuming with other settings would not continue the same run: refused in one line,
    naming the first key that differs and the overrides the run was started with."""

    def relevant(c: dict) -> dict:
        out = {k: v for k, v in c.items() if k not in FREE_KEYS}
        fed = out.get("federate")
        if isinstance(fed, dict):
            out["federate"] = {k: v for k, v in fed.items() if k not in FREE_FEDERATE_KEYS}
        return out

    key = _first_difference(relevant(stored), relevant(current))
    if key is None:
        return
    overrides = run_dir / ".hydra" / "overrides.yaml"
    started = ""
    if overrides.is_file():
        from omegaconf import OmegaConf

        args = [a for a in OmegaConf.load(overrides) if not str(a).startswith("ckpt_path=")]
        started = f" (it was started with: {' '.join(map(str, args)) or 'no overrides'})"
    raise UserError(
        f"ckpt_path: {key} is {_at(stored, key)!r} in the run to resume, {_at(current, key)!r} "
        f"here; resume with the run's own settings{started}"
    )


def _first_difference(a, b, prefix: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if str(k).endswith("_dir") or str(k).endswith("_file"):
                continue  # where things are, not what is computed
            found = _first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
            if found:
                return found
        return None
    return None if a == b else prefix.rstrip(".")


def _at(c: dict, key: str):
    for part in key.split("."):
        c = c.get(part) if isinstance(c, dict) else None
    return c
