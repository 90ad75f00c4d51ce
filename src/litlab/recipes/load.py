"""Rebuild a trained run from its checkpoint alone: the stored config gives the exact data split
and net; the weights are loaded weights-only. eval, export, serve and compress start here."""

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf


@dataclass
class LoadedRun:
    model: Any  # the LightningModule, holding the checkpoint's weights, in eval mode
    datamodule: Any  # built from the stored config (call setup() for the split you need)
    config: DictConfig  # the run's resolved config, as stored in the checkpoint
    checkpoint: dict  # the raw checkpoint dict (tensors on CPU)


def load_run(
    ckpt_path, data_overrides: dict | None = None, *, trust: bool = False, data_dir=None
) -> LoadedRun:
    """The model and datamodule of the run that wrote `ckpt_path`.

    `data_overrides` replaces data settings (e.g. a batch size or a data_dir on this machine).
    The stored config is data: plain values naming only the kinds of classes the recipes build
    (`litlab.checkpointing.trust`), checked with the overrides merged in and built exactly as
    checked, unless `trust=True`: a crafted file cannot run code. Its data folders move to
    `data_dir` (this machine's; default: LITLAB_DATA_DIR or <project>/data), so a file never
    chooses where litlab writes (`litlab.checkpointing.data_folders`)."""
    from litlab.checkpointing import data_folders
    from litlab.checkpointing import trust as trusted
    from litlab.checkpointing.load import load
    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.config import build

    ckpt = load(ckpt_path)
    if data_overrides:  # this command's own values, resolved where they were composed
        data_overrides = {
            k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in data_overrides.items()
        }
    if data_dir is None:  # as configs/paths/default.yaml says: LITLAB_DATA_DIR or <project>/data
        import os

        from litlab.config.resolvers import PROJECT_ROOT

        data_dir = os.environ.get("LITLAB_DATA_DIR") or str(PROJECT_ROOT / "data")
    stored, source = ckpt[CONFIG_KEY], str(ckpt_path)
    if not trust:
        trusted.check(stored, source)  # plain data first: its folders are then plain strings
        overridden = tuple(data_overrides or ())
        stored = data_folders.here(stored, data_dir, source, overridden=overridden)
    cfg = trusted.checked(stored, source, data_overrides, trust=trust)
    datamodule = build.datamodule(cfg)
    model = build.model(cfg, datamodule)
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    return LoadedRun(model, datamodule, cfg, ckpt)
