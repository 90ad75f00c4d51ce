"""Every job of a sweep, checked before the first one starts (`Guard.on_multirun_start`, before
Hydra's sweeper makes the sweep dir): a bad value in the third job of `-m seed=1,2,-5` costs
one line naming that job's overrides and exit 2, not two trained jobs and a failed third.

Each job's config is composed as the launcher will compose it (`load_sweep_config` on the
sweep's overrides: Hydra's basic sweeper's grid, or the Optuna search's fixed overrides with
each trial queued up front) and checked by its entry point's own validation
(`config.validate.job_config`), with `${hydra:...}` resolving as in that job. Nothing is
written; the cost is one composition and one validation per job (torch is imported once, as
the first job would import it).
"""

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from litlab.errors import UserError

BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
OPTUNA = "hydra_plugins.litlab_optuna_sweeper.optuna_sweeper.LitlabOptunaSweeper"


def jobs(config: DictConfig, loader) -> list[list[str]]:
    """Each job's overrides, where the sweeper knows them up front (else none)."""
    sweeper = OmegaConf.select(config, "hydra.sweeper", default=None) or {}
    arguments = [str(o) for o in config.hydra.overrides.task]
    target = sweeper.get("_target_")
    if target == BASIC:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from litlab.compat.hydra import grid_jobs

        params = sweeper.get("params") or {}
        given = [f"{k}={v}" for k, v in params.items()] + arguments
        return grid_jobs(OverridesParser.create(config_loader=loader).parse_overrides(given))
    if target == OPTUNA:
        from litlab.sweeps import search_space

        options = OmegaConf.to_container(sweeper, resolve=False)
        _, fixed = search_space.build(options.get("params"), arguments)
        queued = [
            [f"{k}={search_space.as_override_value(v)}" for k, v in trial.items()]
            for trial in options.get("enqueue_trials") or []
        ]
        return [fixed + trial for trial in queued] or [fixed]
    return []


def _varying(all_jobs: list[list[str]], job: list[str]) -> list[str]:
    """The overrides of `job` that differ between jobs (else all of them): what names it."""
    shared = set.intersection(*(set(j) for j in all_jobs)) if len(all_jobs) > 1 else set()
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
        for num, overrides in enumerate(all_jobs):
            name = " ".join(_varying(all_jobs, overrides))
            try:
                validate.job_config(config_name, _as_job(loader, config, overrides, num))
            except UserError as err:
                raise UserError(f"job {num} of the sweep ({name}): {err}") from None
            except Exception as err:  # noqa: BLE001  (composition: Hydra's multi-line text)
                from litlab.config.hydra_errors import condense

                raise UserError(f"job {num} of the sweep ({name}): {condense(str(err))}") from None
    finally:
        HydraConfig.instance().cfg = sweep
