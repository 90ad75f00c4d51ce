"""Stores the run's resolved config inside every checkpoint, as plain dicts and lists.

That makes a checkpoint self-describing: eval.py, export and resume rebuild the exact data
split and model from it, and it still loads with `torch.load(..., weights_only=True)`.
"""

from typing import Any

from lightning.pytorch.callbacks import Callback

CONFIG_KEY = "litlab_config"


class RunConfigInCheckpoint(Callback):
    """`provenance`: the code and package versions of the run (litlab.checkpointing.provenance),
    stored beside the config, so eval.py can say when its code differs."""

    def __init__(self, config: dict[str, Any], provenance: dict[str, Any] | None = None):
        # a config composed with Hydra's own node (tests, the compose API) stores it without:
        # Hydra's settings are never part of a run, and loaders refuse a stored `hydra` node
        self.config = {k: v for k, v in config.items() if k != "hydra"}
        self.provenance = provenance

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint[CONFIG_KEY] = self.config
        if self.provenance is not None:
            from litlab.checkpointing.provenance import KEY

            checkpoint[KEY] = self.provenance
