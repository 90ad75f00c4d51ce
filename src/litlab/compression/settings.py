"""The settings of `python src/compress.py` (configs/compress.yaml, configs/compress/*.yaml),
with their bounds and rules: checked by `config.validate.entry_config` before torch is imported
where the check needs none; which steps fit the checkpoint's task kind is checked against the
checkpoint (`check_files`) before any data is read or the original model is tested."""

from typing import Annotated, Literal

from pydantic import model_validator

from litlab.bounds import Fraction, Interval, MinLen, PosFloat, PosInt, Seed
from litlab.config.settings import EntrySettings, Settings
from litlab.errors import UserError


class PruneSettings(Settings):
    method: Literal["structured", "unstructured"] = "structured"
    #: parameters kept / parameters before
    ratio: Annotated[Fraction, "a share of the parameters to keep in (0, 1), e.g. 0.1"] = 0.1
    steps: PosInt = 5
    round_to: PosInt | None = None
    importance_norm: Annotated[Literal[1, 2], "1 (L1) or 2 (L2)"] = 2
    lr: PosFloat | None = 0.01


class DistillSettings(Settings):
    #: null: the checkpoint teaches; a path: that run's model teaches this run's data
    teacher: str | None = None
    #: a model config (`_target_`, checked by its signature) or keys merged onto the teacher's;
    #: null: the teacher's own model, narrowed (litlab.compression.students)
    student: dict | None = None
    #: a student merged onto the teacher's model is narrowed to at most this share of the
    #: teacher's parameters (null: taken as given)
    max_params_ratio: (
        Annotated[float, Interval(gt=0, le=1), "a share of the teacher's parameters in (0, 1]"]
        | None
    ) = 0.25
    alpha: Annotated[float, Interval(ge=0, le=1), "a weight in [0, 1]"] = 0.7
    #: null: the task kind's (`Kind.distill_temperature`: 4, node classification 1)
    temperature: PosFloat | None = None


class QuantizeSettings(Settings):
    calibration_batches: PosInt = 8
    per_channel: bool = True
    #: the share of the previous stage's test metric the int8 file may lose; more: the file is
    #: deleted and the report says so (null: the task kind's `quantize_max_drop`)
    max_drop: Annotated[Fraction, "a share of the test metric in (0, 1), e.g. 0.02"] | None = None


class Steps(Settings):
    """The chain, in the order given (`compress=[distill,quantize]`)."""

    prune: PruneSettings | None = None
    distill: DistillSettings | None = None
    quantize: QuantizeSettings | None = None
    order: list[str] = []

    @model_validator(mode="before")
    @classmethod
    def _remember_order(cls, data):
        if isinstance(data, dict) and "order" not in data:
            data = {**data, "order": [k for k in data if data[k] is not None]}
        return data

    @model_validator(mode="after")
    def _chain(self):
        if not self.order:
            raise UserError("compress=[]: choose steps from prune, distill, quantize")
        if "quantize" in self.order and self.order[-1] != "quantize":
            raise UserError(
                "compress: quantize must be the last step (it leaves an int8 ONNX file)"
            )
        return self


class ReportSettings(Settings):
    batch_sizes: Annotated[list[PosInt], MinLen(1)] = [1, 64]
    budget_s: PosFloat = 3.0
    onnx: bool = True


class CompressSettings(EntrySettings):
    ckpt_path: str
    data_overrides: dict = {}
    seed: Seed = 42
    compress: Steps
    #: build whatever the checkpoints' stored configs name (only for files you trust)
    trust_checkpoint: bool = False
    report: ReportSettings = ReportSettings()

    def run_view(self, cfg):
        """This command's keys with the checkpoint's model and data, as the step trainings
        see them (the callbacks interpolate `${model.monitor}`)."""
        from omegaconf import open_dict

        from litlab.checkpointing.trust import merged
        from litlab.config.checks import check_checkpoint, check_checkpoint_exists, stored_config

        check_checkpoint_exists(self.ckpt_path)
        # only allowed targets are imported; the data overrides fit the stored data
        check_checkpoint(self.ckpt_path, None, self.trust_checkpoint, dict(self.data_overrides))
        stored = merged(stored_config(self.ckpt_path), dict(self.data_overrides))
        view = cfg.copy()
        with open_dict(view):
            view.model, view.data = stored["model"], stored["data"]
            if view.trainer.get("max_epochs") is None:  # as the recipe sets it: the kind's
                view.trainer.max_epochs = self.kind_epochs(stored)
        return view

    @staticmethod
    def kind_epochs(stored: dict) -> int:
        """`trainer.max_epochs=null`: the epochs of the checkpoint's task kind."""
        from litlab import tasks

        return tasks.kind_of_data(stored["data"]["_target_"]).compress_epochs

    def check_kind(self, kind) -> None:
        """Every step applies to the checkpoint's task kind (`Kind.compression`)."""
        steps = self.compress
        if steps.prune:
            kind.refuse_compression(f"prune_{steps.prune.method}")
        for name in ("distill", "quantize"):
            if getattr(steps, name) is not None:
                kind.refuse_compression(name)

    def check_files(self) -> None:
        """The checkpoint is litlab's; a teacher checkpoint too; a distillation student can
        learn the checkpoint's data."""
        from litlab.config.checks import (
            check_checkpoint,
            check_checkpoint_exists,
            check_student,
            stored_config,
        )

        # the data overrides were checked with the checkpoint (`run_view`)
        distill = self.compress.distill
        if distill and distill.teacher is not None:
            check_checkpoint_exists(distill.teacher)
            check_checkpoint(distill.teacher, None, self.trust_checkpoint)
        if distill:
            check_student(
                distill.student or {}, stored_config(self.ckpt_path), "compress.distill.student"
            )
