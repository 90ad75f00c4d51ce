"""Every entry point's own keys, one `Settings` model each (`ENTRIES`), in one place: the
values of configs/<entry>.yaml that are not a group (`seed`, export's `rtol`, serve's `port`,
`federate.*`, `compress.*`), with their types and bounds (`litlab.bounds`); rules across keys
in `@model_validator`s, rules on the data's task kind in `check_kind`, across the run's groups
in `check_groups`, on files and ports in `check_files` (`config.validate` runs them in order).
The recipes receive them typed; configs/*.yaml's comments say what each key does.
"""

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from litlab.bounds import Ge, Gt, Interval, NonNegFloat, NonNegInt, PosFloat, PosInt, Seed
from litlab.config import checkpoints, rules
from litlab.config.after_training import (
    CompressSettings,
    EntrySettings,
    ExportSettings,
    RebuiltSettings,
    ServeSettings,
)
from litlab.config.models import Settings
from litlab.errors import UserError


class OwnKeys(EntrySettings):
    # groups (trainer, model...) and keys other checks own (threads, tune): not this model's
    model_config = ConfigDict(extra="ignore")


class TrainSettings(OwnKeys):
    seed: Seed
    train: bool = True
    test: bool = True
    ckpt_path: str | None = None
    task_name: str = "train"
    #: how long DDP processes wait for each other to join (runs/ddp_join): up to a day
    ddp_join_timeout: Annotated[float, Interval(gt=0, le=86400), "seconds in (0, 86400]"] = 300
    #: read by the rule below (its values are judged as the Trainer's node)
    trainer: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _something_to_do(self):
        """Something to train or test; only testing needs a checkpoint (no import: fast)."""
        rules.check_run(self.model_dump(include={"train", "test", "ckpt_path", "trainer"}))
        return self

    def check_files_exist(self) -> None:
        if self.ckpt_path is not None:
            checkpoints.check_checkpoint_exists(self.ckpt_path)

    def check_groups(self, c: dict) -> None:
        """A checkpoint to resume holds this model."""
        if self.ckpt_path is not None:
            checkpoints.check_checkpoint(self.ckpt_path, c["model"])


class EvalSettings(RebuiltSettings, OwnKeys):
    """The model and data come from the checkpoint's stored config, or from the one an
    exported file's metadata holds (`model_path`: a model.onnx of src/export.py)."""

    split: Literal["test", "val"] = "test"
    predictions: bool = True
    ckpt_path: str | None = None
    model_path: str | None = None

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
        super().check_files_exist()

    def check_files(self) -> None:
        if self.model_path is not None:
            return checkpoints.check_exported_to_rebuild(
                self.model_path, self.trust_checkpoint, self.data_overrides
            )
        super().check_files()


# ------------------------------------------------------------------------------ federate.py
class DpSettings(Settings):
    mode: Literal["none", "local", "central"] = "none"
    clipping_norm: PosFloat = 1.0
    noise_multiplier: NonNegFloat = 0.1
    epsilon: PosFloat = 10.0
    delta: Annotated[float, Interval(gt=0, lt=1)] = 1e-5


class ClientResources(Settings):
    # a Ray actor with no CPU is never scheduled: the run would wait forever
    num_cpus: Annotated[float, Gt(0)] = 1
    num_gpus: NonNegFloat = 0.0


class RayInitArgs(Settings):
    # other keys go to ray.init as they are (e.g. _temp_dir)
    model_config = ConfigDict(extra="allow")

    num_cpus: PosInt = 2
    num_gpus: NonNegInt = 0
    # Ray refuses less than ~75 MB
    object_store_memory: Annotated[int, Ge(78_643_200), "a number of bytes >= 78643200"] = (
        100_000_000
    )
    include_dashboard: bool = False
    log_to_driver: bool = False


class Backend(Settings):
    client_resources: ClientResources = ClientResources()
    init_args: RayInitArgs = RayInitArgs()

    @model_validator(mode="after")
    def _fits(self):
        for what in ("cpus", "gpus"):
            need = getattr(self.client_resources, f"num_{what}")
            have = getattr(self.init_args, f"num_{what}")
            if need > have:
                raise UserError(
                    f"federate.backend.client_resources.num_{what}={need:g} is more than the "
                    f"{have} {what[:3].upper()}s of federate.backend.init_args.num_{what}: no client "
                    "could run"
                )
        return self


class FederateSettings(Settings):
    """`federate:` in configs/federate.yaml, checked before any data is read or Ray starts."""

    num_clients: PosInt = 10
    rounds: PosInt = 20
    fraction: Annotated[float, Interval(gt=0, le=1)] = 1.0
    local_epochs: PosInt | Literal["auto"] = "auto"
    lr_decay: Literal["constant", "cosine"] = "cosine"
    partition: Literal["iid", "dirichlet"] = "dirichlet"
    alpha: PosFloat = 0.5
    seed: Seed = 42
    client_eval: bool = True
    compression: Literal["none", "int8", "topk"] = "none"
    topk_ratio: Annotated[float, Interval(gt=0, lt=1)] = 0.25
    dp: DpSettings = DpSettings()
    fail_clients: list[NonNegInt] = Field(default_factory=list)
    verbose: bool = False
    backend: Backend = Backend()
    # Flower's strategy: a `_target_` node, judged by its own model
    strategy: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _clients_exist(self):
        if int(self.num_clients * self.fraction) < 1:
            raise UserError(
                f"federate.fraction={self.fraction} samples no client of {self.num_clients} "
                f"in a round; use a fraction >= {1 / self.num_clients:.3g}"
            )
        if bad := [c for c in self.fail_clients if c >= self.num_clients]:
            raise UserError(
                f"federate.fail_clients={self.fail_clients} names client {bad[0]}; "
                f"clients are 0 to {self.num_clients - 1}"
            )
        return self


class FederateCommandSettings(OwnKeys):
    federate: FederateSettings = Field(default_factory=FederateSettings)
    seed: Seed = 42
    ckpt_path: str | None = None
    task_name: str
    optimized_metric: Literal["test/acc", "test/loss", "federate/bytes_per_round"] | None = (
        "test/acc"
    )

    @classmethod
    def prepare(cls, cfg) -> None:
        """`federate.local_epochs=auto` -> the number the data's task kind declares, in place:
        the clients' trainer.max_epochs interpolates it, the stored run config holds it."""
        if cfg.federate.get("local_epochs") != "auto":
            return
        from litlab import tasks
        from litlab.tasks.kind import Kind

        try:
            epochs = tasks.kind_of_data(str(cfg.data._target_)).federated_local_epochs
        except Exception:  # noqa: BLE001  (a bad data target is refused by the checks)
            epochs = Kind.federated_local_epochs  # the default of every kind
        cfg.federate.local_epochs = epochs


# ------------------------------------------------------------------------------ report.py
class ReportSettings(EntrySettings):
    #: a run dir or a sweep dir (litlab.report.VALID)
    path: str = ""

    def check_files(self) -> None:
        from litlab.report import kind_of

        kind_of(self.path)


class SweepSummarySettings(Settings):
    """`hydra.callbacks.sweep_summary.*` (configs/hydra/default.yaml), checked as a sweep
    starts: Hydra builds the callback from whatever is given (`fail_fast=maybe` would be true)."""

    #: overrides whose last key part is listed here mark replicas (mean ± std per group)
    replica_keys: list[str] = Field(default_factory=lambda: ["seed", "fold"])
    #: summary.png of the objective per job
    plot: bool = True
    #: report.html at the end (`python src/report.py path=<sweep dir>` writes it later)
    report: bool = True
    #: no job starts after the first failed one (the grid sweeper reads it)
    fail_fast: bool = False


class SearchSettings(Settings):
    """`hydra.sweeper.*` of `hydra/sweeper=litlab_optuna` (configs/hparams_search/), checked as
    the sweep starts, before its folder is claimed: Hydra's structured config takes
    `n_trials=0` or `timeout=-5`, and the search would run no trial and end on a RuntimeError
    with an empty study written. The search space and sampler are the search's own checks."""

    model_config = ConfigDict(extra="ignore")  # params, sampler, pruner, enqueue_trials, ...
    study_name: Annotated[str, Field(min_length=1), "a non-empty name"]
    storage: str | None = None
    direction: Literal["maximize", "minimize", "max", "min"] = "maximize"
    #: the study's total over resumes and workers
    n_trials: PosInt = 20
    timeout: PosFloat | None = None
    heartbeat_interval: PosInt | None = None
    strict_resume: bool = True


#: entry point (configs/<name>.yaml) -> its settings model
ENTRIES = {
    "train": TrainSettings,
    "eval": EvalSettings,
    "federate": FederateCommandSettings,
    "export": ExportSettings,
    "serve": ServeSettings,
    "compress": CompressSettings,
    "report": ReportSettings,
}
