"""Every job of a sweep, checked before the first one starts (`Guard.on_multirun_start`, before
Hydra's sweeper makes the sweep dir): a bad value in the third job of `-m seed=1,2,-5` costs
one line naming that job's overrides and exit 2, not two trained jobs and a failed third.

Each job's config is composed as the launcher will compose it (`load_sweep_config` on the
sweep's overrides: Hydra's basic sweeper's grid, or the Optuna search's fixed overrides with
each trial queued up front and with its space at its edges) and checked as its entry point checks it
(`config.validate.check`), with `${hydra:...}` resolving as in that job. Nothing is
written; the cost is one composition and one validation per job (torch is imported once, as
the first job would import it).

The parallel launcher's settings (`hydra/launcher=parallel`), checked first when a sweep
starts (`run_dir.Guard.on_multirun_start`, before every job is composed and checked): a wrong
`hydra.launcher.n_jobs` costs one line in a second, and nothing is written. The launcher plans
its slots with the same function (hydra_plugins/litlab_launchers/parallel.py)."""

import os

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from litlab.compat.hydra import BASIC_SWEEPER as BASIC  # hydra/sweeper=basic's own
from litlab.errors import UserError

GRID = "hydra_plugins.litlab_grid_sweeper.grid_sweeper.LitlabGridSweeper"  # hydra/sweeper=basic
OPTUNA = "hydra_plugins.litlab_optuna_sweeper.optuna_sweeper.LitlabOptunaSweeper"


def jobs(config: DictConfig, loader) -> list[tuple[str, list[str]]]:
    """(what the job is, its overrides) for each job the sweeper knows up front (else none)."""
    sweeper = OmegaConf.select(config, "hydra.sweeper", default=None) or {}
    arguments = [str(o) for o in config.hydra.overrides.task]
    target = sweeper.get("_target_")
    if target in (BASIC, GRID):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from litlab.compat.hydra import grid_jobs

        params = sweeper.get("params") or {}
        given = [f"{k}={v}" for k, v in params.items()] + arguments
        grid = grid_jobs(OverridesParser.create(config_loader=loader).parse_overrides(given))
        return [(f"job {i} of the sweep", job) for i, job in enumerate(grid)]
    if target == OPTUNA:
        return _search_jobs(OmegaConf.to_container(sweeper, resolve=False), arguments)
    return []


def _search_jobs(options: dict, arguments: list[str]) -> list[tuple[str, list[str]]]:
    """An Optuna search: its fixed overrides with each trial queued up front, and with every
    dimension of the space at its edges (low, high; each choice of a categorical one)."""
    from litlab.sweeps import search_space

    space, fixed = search_space.build_space(options.get("params"), arguments)
    value = search_space.as_override_value
    queued = [  # Optuna uses a queued value only for a dimension of the space
        (f"queued trial {i} of the search", fixed + [f"{k}={value(t[k])}" for k in space if k in t])
        for i, t in enumerate(options.get("enqueue_trials") or [])
    ]
    edges = [list(getattr(d, "choices", None) or (d.low, d.high)) for d in space.values()]
    corners = [
        (
            "the search space's edge",
            fixed + [f"{k}={value(e[min(i, len(e) - 1)])}" for k, e in zip(space, edges)],
        )
        for i in range(max((len(e) for e in edges), default=1))
    ]
    return queued + corners


def _varying(all_jobs: list[tuple[str, list[str]]], job: list[str]) -> list[str]:
    """The overrides of `job` that differ between jobs (else all of them): what names it."""
    sets = [set(overrides) for _, overrides in all_jobs]
    shared = set.intersection(*sets) if len(sets) > 1 else set()
    return [o for o in job if o not in shared] or job


def _as_job(loader, config: DictConfig, overrides: list[str], num: int) -> DictConfig:
    """The job's config as the launcher composes it, registered as the current HydraConfig
    (the caller restores the sweep's); returned without its `hydra` node, as the task sees it."""
    from hydra.core.hydra_config import HydraConfig

    job = loader.load_sweep_config(config, list(overrides))
    with read_write(job.hydra), open_dict(job.hydra):
        job.hydra.job.num, job.hydra.job.id = num, f"{num}"
        subdir = OmegaConf.select(job, "hydra.sweep.subdir", default=None)
        job.hydra.runtime.output_dir = f"{job.hydra.sweep.dir}/{subdir}"
    HydraConfig.instance().set_config(job)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job


def check_jobs(config: DictConfig, config_name: str) -> None:
    """Compose and validate every job of the sweep; one `UserError` naming the first bad job."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from litlab.config import validate

    loader = GlobalHydra.instance().config_loader()
    try:
        all_jobs = jobs(config, loader)
    except UserError:
        raise
    except Exception:  # noqa: BLE001  (overrides the sweeper cannot split: it says so itself)
        return
    sweep = HydraConfig.instance().cfg
    try:
        for num, (what, overrides) in enumerate(all_jobs):
            name = f"{what} ({' '.join(_varying(all_jobs, overrides))})"
            try:
                validate.check(_as_job(loader, config, overrides, num), config_name)
            except UserError as err:
                raise UserError(f"{name}: {err}") from None
            except Exception as err:  # noqa: BLE001  (composition: Hydra's multi-line text)
                from litlab.config.hydra_errors import condense

                raise UserError(f"{name}: {condense(str(err))}") from None
    finally:
        HydraConfig.instance().cfg = sweep


def grid_overrides(config: DictConfig) -> list[list[str]] | None:
    """Every job's overrides of a grid sweep (None: overrides the sweeper cannot split, which
    it says itself when it starts)."""
    from hydra.core.global_hydra import GlobalHydra

    try:
        return [overrides for _, overrides in jobs(config, GlobalHydra.instance().config_loader())]
    except Exception:  # noqa: BLE001  (overrides the sweeper cannot split: it says so itself)
        return None


# -------------------------------------------------------- launcher check
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
