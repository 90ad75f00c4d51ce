"""Hydra internals litlab uses (checked against hydra-core 1.3.8).

- `hydra.core.utils._save_config`: writes .hydra/config.yaml as a Hydra run does (the Python
  API makes its run dir as Hydra would: runs/run_dir);
- `JobReturn._return_value`: a job's return value or exception without re-raising it (the
  sweep summary and the Optuna sweeper record failed jobs and go on);
- `BasicSweeper.split_arguments`: the jobs of a grid sweep, in Hydra's basic sweeper's order
  (litlab's grid sweeper runs them so: sweeps/grid; every job is checked before the first
  starts: runs/sweep_dir, which knows the basic sweeper by its `_target_`, `BASIC_SWEEPER`).
- `hydra._internal.config_repository.ConfigRepository`: rebuilt over a code snapshot's
  configs (utils/code_state).
"""

CHECKED_WITH = "1.3.8"
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # hydra/sweeper=basic


def _fail(what: str):
    import hydra

    from litlab.compat import missing

    return missing("hydra-core", CHECKED_WITH, hydra.__version__, what)


def save_config(cfg, filename: str, directory) -> None:
    from hydra.core.utils import _save_config

    _save_config(cfg, filename, directory)


def job_outcome(job_return):
    """What the job returned, or the exception it raised (JobReturn.return_value re-raises)."""
    return job_return._return_value


def grid_jobs(overrides) -> list[list[str]]:
    """Each job's overrides, in Hydra's order, from parsed overrides (`OverridesParser`)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def config_repository(search_path):
    """Hydra's config repository over `search_path` (a loader's `repository` is rebuilt with it
    when the search path changes: utils/code_state)."""
    from hydra._internal.config_repository import ConfigRepository

    return ConfigRepository(config_search_path=search_path)


def check_hydra() -> None:
    from hydra.core import utils
    from hydra.core.utils import JobReturn

    if not callable(getattr(utils, "_save_config", None)):
        raise _fail("hydra.core.utils._save_config")
    if "_return_value" not in getattr(JobReturn, "__dataclass_fields__", {}):
        raise _fail("JobReturn._return_value")
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    if f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}" != BASIC_SWEEPER:
        raise _fail(BASIC_SWEEPER)
    if not callable(getattr(BasicSweeper, "split_arguments", None)):
        raise _fail("BasicSweeper.split_arguments")
    try:
        from hydra._internal.config_repository import ConfigRepository  # noqa: F401
    except ImportError as err:
        raise _fail("hydra._internal.config_repository.ConfigRepository") from err
