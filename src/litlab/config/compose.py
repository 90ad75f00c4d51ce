"""Compose a config in Python exactly as `python src/<name>.py overrides` would: for tests,
benchmarks and notebooks that call `train(cfg)` in-process."""

from pathlib import Path

from litlab.config.resolvers import CODE_ROOT

CONFIG_DIR = CODE_ROOT / "configs"


def compose(config_name: str = "train", overrides=(), output_dir: str | Path | None = None):
    """The composed config (with its `hydra` node, registered as the current HydraConfig).

    `output_dir` plays the run dir Hydra would create (made if missing)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name, overrides=list(overrides), return_hydra_config=True)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.job.num = 0
            cfg.hydra.job.id = "in-process"
        Path(output_dir).mkdir(parents=True, exist_ok=True)
    HydraConfig.instance().set_config(cfg)
    return cfg
