"""A callback that DDP tests add with `+callbacks.rank_probe`: each rank writes what it trains
with (rank, learning rate, run dir, process id) to `<out>/<random>.json`, outside the run dir."""

import json
import os
import time
import uuid
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

import litlab


class RankProbe(Callback):
    def __init__(self, out: str):
        self.out = Path(out)

    def on_train_start(self, trainer, pl_module) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        record = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "root_dir": str(Path(trainer.default_root_dir).resolve()),
            "pid": os.getpid(),
            "litlab": str(Path(litlab.__file__).resolve()),  # which copy of the code runs
            # what a launcher gave the job (hydra/launcher=parallel: its own port and cores)
            "master_port": os.environ.get("MASTER_PORT"),
            "threads": torch.get_num_threads(),
            "started": time.time(),
        }
        (self.out / f"{uuid.uuid4().hex}.json").write_text(json.dumps(record))
