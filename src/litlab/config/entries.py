"""The settings models of train.py, eval.py and federate.py (the entry points after training
keep theirs beside their code: `export/settings.py`, `serving/settings.py`,
`compression/settings.py`, `recipes/html_report.py`). Each holds the entry point's own
top-level keys; `validate.entry_config` checks the groups, then calls the hooks below for the
rules across groups and the files the keys name."""

from typing import Annotated, Literal

import annotated_types as at
from pydantic import ConfigDict, Field, model_validator

from litlab.bounds import Seed
from litlab.config.federate_settings import FederateSettings
from litlab.config.settings import Settings
from litlab.errors import UserError

#: how long DDP processes wait for each other to join (runs/ddp_join): up to a day
JoinSeconds = Annotated[float, at.Interval(gt=0, le=86400), "seconds in (0, 86400]"]


class _OwnKeys(Settings):
    # the groups (trainer, model, ...) and the keys other checks own (threads, tune) are
    # checked by their targets: not this model's
    model_config = ConfigDict(extra="ignore")


class TrainSettings(_OwnKeys):
    """train.py's own top-level keys (Hydra refuses unknown ones itself)."""

    seed: Seed
    train: bool = True
    test: bool = True
    ckpt_path: str | None = None
    task_name: str = "train"
    ddp_join_timeout: JoinSeconds = 300

    def check_files_exist(self) -> None:
        if self.ckpt_path is not None:
            from litlab.config.checks import check_checkpoint_exists

            check_checkpoint_exists(self.ckpt_path)

    def check_groups(self, c: dict) -> None:
        """Something to do, on what exists; a checkpoint to resume holds this model."""
        from litlab.config.checks import check_checkpoint, check_run

        check_run(c)
        if self.ckpt_path is not None:
            check_checkpoint(self.ckpt_path, c["model"])


class EvalSettings(_OwnKeys):
    """eval.py's keys: the model and data come from the checkpoint's stored config, or from
    the one an exported file's metadata holds (`model_path`: a model.onnx of src/export.py)."""

    split: Literal["test", "val"] = "test"
    predictions: bool = True
    ckpt_path: str | None = None
    model_path: str | None = None
    trust_checkpoint: bool = False
    data_overrides: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_model(self):
        if self.ckpt_path is not None and self.model_path is not None:
            raise UserError(
                f"ckpt_path={self.ckpt_path} and model_path={self.model_path} are both given; "
                "eval.py scores one: a checkpoint (ckpt_path=) or an exported file (model_path=)"
            )
        if self.ckpt_path is None and self.model_path is None:
            raise UserError(
                "ckpt_path is required: add ckpt_path=logs/train/runs/<run>/checkpoints/"
                "<file>.ckpt to the command (or model_path=<file>.onnx, an exported model)"
            )
        return self

    def check_files_exist(self) -> None:
        if self.model_path is not None:
            from litlab.checkpointing.exported import check_exists

            return check_exists(self.model_path)
        from litlab.config.checks import check_checkpoint_exists

        check_checkpoint_exists(self.ckpt_path)

    def check_files(self) -> None:
        from litlab.config import checks

        if self.model_path is not None:
            return checks.check_exported_to_rebuild(
                self.model_path, self.trust_checkpoint, self.data_overrides
            )
        checks.check_checkpoint_to_rebuild(
            self.ckpt_path, self.trust_checkpoint, self.data_overrides
        )


class FederateCommandSettings(_OwnKeys):
    """federate.py's own keys, `federate.*` among them (`config.federate_settings`)."""

    federate: FederateSettings = Field(default_factory=FederateSettings)
    seed: Seed = 42
    ckpt_path: str | None = None
    task_name: str
    optimized_metric: Literal["test/acc", "test/loss", "federate/bytes_per_round"] | None = (
        "test/acc"
    )


#: entry point (configs/<name>.yaml) -> its settings model, for the checks of sweep jobs
BY_ENTRY = {"train": TrainSettings, "eval": EvalSettings, "federate": FederateCommandSettings}
