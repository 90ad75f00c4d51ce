"""Tiny runs and the rank probe that the DDP, launcher, multi-node and FSDP tests share."""

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/: subprocesses import ddp_probe, faults
TINY = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.num_sanity_val_steps=0",
]
PROBE = ["+callbacks.rank_probe._target_=ddp_probe.RankProbe"]


def probe_env() -> dict:
    """PYTHONPATH for a subprocess whose config names a module of tests/ (ddp_probe, faults)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
