"""The parallel launcher's settings (`hydra/launcher=parallel`), checked first when a sweep
starts (`run_dir.Guard.on_multirun_start`, before every job is composed and checked): a wrong
`hydra.launcher.n_jobs` costs one line in a second, and nothing is written. The launcher plans
its slots with the same function (hydra_plugins/litlab_launchers/parallel.py)."""

import os

from omegaconf import DictConfig, OmegaConf

PARALLEL = "hydra_plugins.litlab_launchers.parallel.ParallelLauncher"


def machine_gpus() -> list[str]:
    """The GPUs this process may hand out (no torch import on a machine without any)."""
    from litlab.config.resolvers import certainly_no_gpu
    from litlab.sweeps.parallel_slots import visible_gpus

    if certainly_no_gpu():
        return []
    import torch

    return visible_gpus(torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def slots(launcher: DictConfig) -> list:
    """The launcher's slots on this machine, or a UserError naming what is valid."""
    from litlab import threads
    from litlab.sweeps.parallel_slots import plan

    return plan(
        launcher.get("n_jobs", 2),
        launcher.get("gpus_per_job", "auto"),
        machine_gpus(),
        threads.free_cores(),
    )


def check_launcher(config: DictConfig) -> None:
    launcher = OmegaConf.select(config, "hydra.launcher", default=None)
    if launcher is not None and launcher.get("_target_") == PARALLEL:
        slots(launcher)
