# ruff: noqa: UP006, UP035, UP045  (OmegaConf 2.3 structured configs need typing.Dict/Optional)
"""`hydra/sweeper=litlab_optuna`: a Hydra sweeper on current Optuna (configs/hparams_search/).

Hydra imports this module for every command (its plugin scan), so it only declares the config
and the class; optuna is imported by `litlab.sweeps.optuna_search` when a search runs.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from litlab.sweeps.grid import LaunchingSweeper


@dataclass
class LitlabOptunaSweeperConf:
    _target_: str = "hydra_plugins.litlab_optuna_sweeper.optuna_sweeper.LitlabOptunaSweeper"
    # sampler and pruner stay configs here: the sweeper builds them (and sends the pruner's
    # config to the trials)
    _recursive_: bool = False
    study_name: str = "search"
    # any SQLAlchemy URL; null: sqlite:///<sweep dir>/optuna.db
    storage: Optional[str] = None
    # maximize | minimize (max | min accepted)
    direction: str = "maximize"
    # total trials of the study, over resumes and workers
    n_trials: int = 20
    # seconds; this worker starts no new trial after it
    timeout: Optional[float] = None
    sampler: Dict[str, Any] = field(
        default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": None}
    )
    # null: no pruning
    pruner: Optional[Dict[str, Any]] = None
    # {config.key: {type: float|int|categorical, low, high, log, step, choices}}
    params: Dict[str, Any] = field(default_factory=dict)
    # params to try first, e.g. [{model.optimizer.lr: 0.005}] (once per study)
    enqueue_trials: List[Dict[str, Any]] = field(default_factory=list)
    # seconds; marks trials of dead workers on other machines as failed (RDB storages)
    heartbeat_interval: Optional[int] = None
    # refuse to resume a study whose non-searched overrides (e.g. trainer.max_epochs) differ
    # from this command's: its trials would mix budgets (false: resume anyway, on purpose)
    strict_resume: bool = True


ConfigStore.instance().store(
    group="hydra/sweeper", name="litlab_optuna", node=LitlabOptunaSweeperConf, provider="litlab"
)


class LitlabOptunaSweeper(LaunchingSweeper):
    def __init__(self, **options: Any) -> None:
        self.options = {
            k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig) else v
            for k, v in options.items()
        }

    def sweep(self, arguments: List[str]) -> None:
        import sys

        from litlab.errors import UserError
        from litlab.sweeps import optuna_search

        try:
            optuna_search.run_search(self, list(arguments))
        except UserError as err:  # bad input to the search: one line, exit 2 (as in litlab.cli)
            if sys.stderr is not sys.__stderr__ and hasattr(sys.stderr, "truncate"):
                sys.stderr.seek(0)  # litlab.cli holds stderr until a task starts: drop the
                sys.stderr.truncate()  # info lines Optuna wrote there, keep the one error line
            print(f"error: {err}", file=sys.__stderr__)
            raise SystemExit(2) from None
