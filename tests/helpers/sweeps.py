"""What the sweep tests share: a tiny budget per job and the train command a user types."""

import sys
from pathlib import Path

from helpers.runs import QUIET, ROOT, TINY_BUDGET

FAST = TINY_BUDGET  # 2 epochs of 3 batches, 2 val/test batches, no sanity check
NO_PRUNING = "hydra.sweeper.pruner=null"


def command(log_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "src" / "train.py"),
        f"paths.log_dir={log_dir}",
        *QUIET,
        *overrides,
    ]
