"""The sweep summary's settings (`hydra.callbacks.sweep_summary.*`, configs/hydra/default.yaml),
checked when a sweep starts (`run_dir.Guard.on_multirun_start`), before any job: Hydra builds
the callback from whatever is given, so `fail_fast=maybe` would read as true and
`replica_keys=5` would fail inside Hydra with a message about an `int`."""

from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from litlab.config.settings import Settings, check

KEY = "hydra.callbacks.sweep_summary"


class SweepSummarySettings(Settings):
    #: overrides whose last key part is listed here mark replicas (mean ± std per group)
    replica_keys: list[str] = Field(default_factory=lambda: ["seed", "fold"])
    #: summary.png of the objective per job
    plot: bool = True
    #: report.html at the end (`python src/report.py path=<sweep dir>` writes it later)
    report: bool = True
    #: no job starts after the first failed one (the grid sweeper reads it)
    fail_fast: bool = False


def check_summary(config: DictConfig) -> None:
    node = OmegaConf.select(config, KEY, default=None)
    if node is None:
        return
    values = OmegaConf.to_container(node, resolve=True)  # a mapping: Hydra refuses others first
    values.pop("_target_", None)
    check(SweepSummarySettings, values, prefix=KEY)
