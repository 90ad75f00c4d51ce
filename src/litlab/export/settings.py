"""The settings of `python src/export.py` (configs/export.yaml), declared with their bounds:
`config.validate.entry_config` checks them in one line before torch is imported, and the
recipe receives them as one `ExportSettings`."""

from typing import Annotated, Literal

from pydantic import model_validator

from litlab.bounds import MinLen, OptionalFraction, PosFloat, PosInt
from litlab.config.settings import EntrySettings, Settings
from litlab.errors import UserError

Format = Literal["onnx", "pt2", "onnx_int8", "tensorrt"]


class LatencySettings(Settings):
    #: batch sizes of the latency table (empty: no table)
    batch_sizes: list[PosInt] = [1, 64]
    #: seconds per table cell at most
    budget_s: PosFloat = 3.0


class ExportSettings(EntrySettings):
    ckpt_path: str
    formats: Annotated[list[Format], MinLen(1)] = ["onnx", "pt2", "onnx_int8"]
    #: keys of the stored data config to replace (checked against the data's own signature)
    data_overrides: dict = {}
    #: fp32 formats pass when max |eager - exported| <= rtol x max |eager|
    rtol: Annotated[PosFloat, "a relative tolerance > 0 (e.g. 1e-4)"] = 1e-4
    #: int8 is written when its test metric keeps all but this share of the checkpoint's
    #: (null: the task kind's `quantize_max_drop`, the share compress=quantize allows)
    int8_max_drop: Annotated[OptionalFraction, "a share in [0, 1), e.g. 0.01"] | None = None
    calibration_batches: PosInt = 16
    latency: LatencySettings = LatencySettings()
    #: build whatever the checkpoint's stored config names (only for files you trust)
    trust_checkpoint: bool = False

    @model_validator(mode="after")
    def _formats(self):
        if len(set(self.formats)) != len(self.formats):
            raise UserError(f"formats={list(self.formats)} names a format twice; list each once")
        if "tensorrt" in self.formats:
            from litlab.export.tensorrt import missing

            if (why := missing()) is not None:
                raise UserError(why)
        return self

    def check_files(self) -> None:
        from litlab.config.checks import check_checkpoint_to_rebuild

        check_checkpoint_to_rebuild(self.ckpt_path, self.trust_checkpoint, self.data_overrides)

    def format_list(self) -> list[str]:
        """The formats to write, in order; int8 is quantized from the fp32 ONNX file."""
        formats = list(self.formats)
        if "onnx_int8" in formats and "onnx" not in formats:
            formats.insert(formats.index("onnx_int8"), "onnx")
        return formats
