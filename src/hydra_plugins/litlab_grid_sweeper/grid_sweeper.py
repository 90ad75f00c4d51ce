# ruff: noqa: UP006, UP035, UP045  (OmegaConf 2.3 structured configs need typing.Dict/Optional)
"""`hydra/sweeper=basic`: Hydra's grid sweep (the same jobs, order and job numbers), which a
re-run with the same `hydra.sweep.dir` resumes, and which ends with every failure listed
(`litlab.sweeps.grid`).

It is stored under Hydra's own name, `basic`, so that every sweep gets it: Hydra's defaults
choose `hydra/sweeper: basic`, and this module is imported by Hydra's plugin scan after Hydra's
core plugins, so its entry replaces theirs. Hydra imports this module for every command: it
only declares the config and the class.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

from litlab.sweeps.grid import LaunchingSweeper


@dataclass
class LitlabGridSweeperConf:
    _target_: str = "hydra_plugins.litlab_grid_sweeper.grid_sweeper.LitlabGridSweeper"
    # jobs handed to the launcher at once (null: all of them)
    max_batch_size: Optional[int] = None
    # sweep overrides kept in the config, e.g. {seed: 1,2,3} (the command line adds to them)
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="basic", node=LitlabGridSweeperConf, provider="litlab"
)


class LitlabGridSweeper(LaunchingSweeper):
    def __init__(self, max_batch_size: Optional[int] = None, params=None) -> None:
        self.max_batch_size = max_batch_size
        self.params = params or {}

    def sweep(self, arguments: List[str]) -> Any:
        from litlab.sweeps import grid

        return grid.run_grid(self, list(arguments))
