"""The run dir as Hydra makes it for a CLI run, made the same way for an in-process run
(`litlab.train([...])`), and removed again when bad input stopped the run before it wrote
anything (both routes: no half-written run dir)."""

import copy
import logging
import os
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict, read_write


def start(cfg: DictConfig, config_name: str) -> DictConfig:
    """Create `hydra.run.dir` with `.hydra/` and the log file, as `@hydra.main` does; returns
    the task's config (without its `hydra` node, as a `@hydra.main` task receives it)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import configure_log

    from litlab.compat.hydra import save_config

    out = Path(OmegaConf.select(cfg, "hydra.run.dir")).resolve()
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.runtime.output_dir = str(out)
        cfg.hydra.job.name = config_name
    HydraConfig.instance().set_config(cfg)
    out.mkdir(parents=True, exist_ok=True)
    task_cfg = copy.deepcopy(cfg)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    if cfg.hydra.output_subdir is not None:
        saved = out / str(cfg.hydra.output_subdir)
        save_config(task_cfg, "config.yaml", saved)
        save_config(OmegaConf.masked_copy(cfg, "hydra"), "hydra.yaml", saved)
        save_config(OmegaConf.create(list(cfg.hydra.overrides.task)), "overrides.yaml", saved)
    configure_log(cfg.hydra.job_logging, cfg.hydra.verbose)
    return task_cfg


def only_hydra_files(path) -> bool:
    """True while a run dir holds nothing but what Hydra wrote before the task started."""
    entries = os.listdir(path) if os.path.isdir(path) else []
    return all(e == ".hydra" or e.endswith(".log") for e in entries)


def remove(path) -> None:
    """Remove a run dir that bad input left empty, its open log file closed first."""
    for handler in logging.getLogger().handlers[:]:
        if isinstance(handler, logging.FileHandler):
            handler.close()
            logging.getLogger().removeHandler(handler)
    shutil.rmtree(path, ignore_errors=True)
