"""The settings of the entry points after training (export.py, serve.py, compress.py), one
`Settings` model each, as `config.entries` declares train's, eval's and federate's."""

import ipaddress
import socket
from pathlib import Path
from typing import Annotated, Literal

from omegaconf import open_dict
from pydantic import Field, model_validator

from litlab.bounds import Fraction, Interval, MinLen, OptionalFraction, PosFloat, PosInt, Seed
from litlab.config import checkpoints, rules
from litlab.config.models import Settings
from litlab.errors import UserError


class EntrySettings(Settings):
    """The keys every entry config has besides its own."""

    task_name: str = ""
    tags: list[str] | None = None


class RebuiltSettings(EntrySettings):
    """A command that rebuilds its run from a checkpoint's stored config (eval, export,
    compress): the file is there before anything is imported, and fit to rebuild from last."""

    ckpt_path: str
    #: keys of the stored data config to replace (checked against the data's own signature)
    data_overrides: dict = {}
    #: build whatever the checkpoint's stored config names (only for files you trust)
    trust_checkpoint: bool = False

    def check_files_exist(self) -> None:
        checkpoints.check_checkpoint_exists(self.ckpt_path)

    def check_files(self) -> None:
        checkpoints.check_checkpoint(
            self.ckpt_path, None, self.trust_checkpoint, dict(self.data_overrides)
        )


# ------------------------------------------------------------------------------ export.py
class LatencySettings(Settings):
    #: batch sizes of the latency table (empty: no table)
    batch_sizes: list[PosInt] = [1, 64]
    #: seconds per table cell at most
    budget_s: PosFloat = 3.0


class ExportSettings(RebuiltSettings):
    formats: Annotated[list[Literal["onnx", "pt2", "onnx_int8", "tensorrt"]], MinLen(1)] = [
        "onnx", "pt2", "onnx_int8"
    ]  # fmt: skip
    #: fp32 formats pass when max |eager - exported| <= rtol x max |eager|
    rtol: Annotated[PosFloat, "a relative tolerance > 0 (e.g. 1e-4)"] = 1e-4
    #: int8 is written when its test metric keeps all but this share of the checkpoint's
    #: (null: the task kind's `quantize_max_drop`, the share compress=quantize allows)
    int8_max_drop: Annotated[OptionalFraction, "a share in [0, 1), e.g. 0.01"] | None = None
    calibration_batches: PosInt = 16
    latency: LatencySettings = LatencySettings()

    @model_validator(mode="after")
    def _formats(self):
        if len(set(self.formats)) != len(self.formats):
            raise UserError(f"formats={list(self.formats)} names a format twice; list each once")
        if "tensorrt" in self.formats and (why := rules.tensorrt_missing()) is not None:
            raise UserError(why)
        return self

    def format_list(self) -> list[str]:
        """The formats to write, in order; int8 is quantized from the fp32 ONNX file."""
        formats = list(self.formats)
        if "onnx_int8" in formats and "onnx" not in formats:
            formats.insert(formats.index("onnx_int8"), "onnx")
        return formats


# ------------------------------------------------------------------------------ serve.py
KiB, MiB = 1 << 10, 1 << 20
#: processes, ONNX Runtime threads and decode threads per worker; threads per core at most
MAX_WORKERS = MAX_THREADS = MAX_DECODE_THREADS = 64
THREADS_PER_CORE = 4
#: the shortest timeout (seconds; 1e-300 would close every connection before its first byte)
#: and the longest wait of any setting
MIN_TIMEOUT_S, MAX_WAIT_S = 0.1, 3600
Seconds = Annotated[float, Field(ge=MIN_TIMEOUT_S, le=MAX_WAIT_S)]


class ServeSettings(EntrySettings):
    """Safe defaults for a service exposed to untrusted clients (docs/deploy.md); every number
    has both bounds (workers x threads at most 4 per core: more only slow each other down)."""

    #: a model.onnx from src/export.py, or a checkpoint (exported first)
    model_path: str = ""
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1
    threads: Annotated[int, Field(ge=1, le=MAX_THREADS)] = 1
    max_batch: Annotated[int, Field(ge=1, le=4096)] = 64
    batching: bool = True
    max_wait_ms: Annotated[float, Field(ge=0, le=1000)] = 1.0
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "warning"
    # request bodies
    max_body_bytes: Annotated[int, Field(ge=KiB, le=1 << 30)] = 8 * MiB
    max_json_bytes: Annotated[int, Field(ge=KiB, le=256 * MiB)] = 2 * MiB
    max_json_depth: Annotated[int, Field(ge=2, le=64)] = 8
    # images: pixels from the header, checked before decoding
    max_image_pixels: Annotated[int, Field(ge=1, le=1 << 28)] = 4096 * 4096
    max_request_pixels: Annotated[int, Field(ge=1, le=1 << 30)] = 64 * MiB
    decode_threads: Annotated[int, Field(ge=1, le=MAX_DECODE_THREADS)] = 2
    # NIfTI volumes: voxels (x channels) from the header, checked before reading
    max_volume_voxels: Annotated[int, Field(ge=1, le=1 << 31)] = 1 << 25
    # connections
    max_header_bytes: Annotated[int, Field(ge=KiB, le=MiB)] = 16 * KiB
    keep_alive_s: Seconds = 5.0
    request_read_timeout_s: Seconds = 15.0
    max_connections: Annotated[int, Field(ge=1, le=100_000)] = 1000
    max_request_s: Seconds = 60.0
    retry_after_s: Annotated[int, Field(ge=0, le=MAX_WAIT_S)] = 1
    drain_timeout_s: Seconds = 30.0

    @model_validator(mode="after")
    def _threads_fit_this_machine(self):
        from litlab.threads import cores

        most = THREADS_PER_CORE * cores()
        if self.workers * self.threads > most:
            raise UserError(
                f"threads={self.threads} x workers={self.workers} is "
                f"{self.workers * self.threads} ONNX Runtime threads; valid: at most {most} "
                f"in all on this machine's {cores()} cores ({THREADS_PER_CORE} per core)"
            )
        return self

    def check_files(self) -> None:
        """The service can listen here (told now, not after 'serving' was printed), and the
        model file is one it can serve."""
        self._address()
        path = Path(self.model_path)
        if not path.is_file():
            raise UserError(
                f"model_path={self.model_path} is not a file; pass a model.onnx from "
                "src/export.py or a .ckpt from src/train.py"
            )
        if path.suffix not in (".onnx", ".ckpt"):
            raise UserError(f"model_path={self.model_path}: expected a .onnx or a .ckpt file")
        if path.suffix == ".ckpt":
            checkpoints.check_checkpoint(path, None, trust=False)

    def _address(self) -> None:
        local = "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            if self.host.replace(".", "").isdigit():  # a mistyped IPv4 address: no DNS query
                raise UserError(f"host={self.host} is not an IP address; {local}") from None
            try:
                socket.getaddrinfo(self.host, None)
            except OSError:
                raise UserError(
                    f"host={self.host} is not an IP address or a known host name; {local}"
                ) from None
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            try:
                probe.bind((self.host, self.port))
            except OSError as err:
                why = "is in use" if err.errno == 98 else f"cannot be bound ({err.strerror})"
                raise UserError(
                    f"port={self.port} on host={self.host} {why}; pick another port=..."
                ) from None


# ------------------------------------------------------------------------------ compress.py
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
    #: a model config (`_target_`, judged by its model) or keys merged onto the teacher's;
    #: null: the teacher's own model, narrowed (litlab.compression.distill)
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


class CompressReportSettings(Settings):
    batch_sizes: Annotated[list[PosInt], MinLen(1)] = [1, 64]
    budget_s: PosFloat = 3.0
    onnx: bool = True


class CompressSettings(RebuiltSettings):
    """Which steps fit the checkpoint's task kind is checked against the checkpoint before any
    data is read or the original model is tested."""

    seed: Seed = 42
    compress: Steps
    report: CompressReportSettings = CompressReportSettings()

    def run_view(self, cfg):
        """This command's keys with the checkpoint's model and data, as the step trainings
        see them (the callbacks interpolate `${model.monitor}`)."""
        from litlab.checkpointing.trust import merged

        self.check_files_exist()
        super().check_files()  # only allowed targets are imported; the data overrides fit
        stored = merged(checkpoints.stored_config(self.ckpt_path), dict(self.data_overrides))
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
        """A teacher checkpoint is litlab's too; a distillation student can learn the
        checkpoint's data (the checkpoint and its data overrides were checked by `run_view`)."""
        distill = self.compress.distill
        if distill and distill.teacher is not None:
            checkpoints.check_checkpoint_exists(distill.teacher)
            checkpoints.check_checkpoint(distill.teacher, None, self.trust_checkpoint)
        if distill:
            stored = checkpoints.stored_config(self.ckpt_path)
            checkpoints.check_student(distill.student or {}, stored, "compress.distill.student")
