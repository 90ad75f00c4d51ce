"""Every setting of `src/serve.py` in one place, with its type and bounds (pydantic), checked by
`config.validate.entry_config` like every entry point's settings: a bad value is one line naming
the setting and what is valid, before the model is loaded; `check_files` then checks the model
file and that this machine can listen on host:port (before "serving" is printed).

The defaults are safe for a service exposed to untrusted clients; docs/deploy.md explains each.
Every number has both bounds, the documented maxima below among them: processes and threads
(64 each, and workers x threads at most 4 per core of this machine: ONNX Runtime's threads
past that only slow each other down), sizes, and timeouts from 0.1 s (a timeout of 1e-300 s
would close every connection before its first byte) to an hour.
"""

import ipaddress
import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from litlab.config.settings import EntrySettings
from litlab.errors import UserError

KiB, MiB = 1 << 10, 1 << 20
#: worker processes, ONNX Runtime threads per worker, decode threads per worker
MAX_WORKERS = MAX_THREADS = MAX_DECODE_THREADS = 64
#: workers x threads per core this machine may run on
THREADS_PER_CORE = 4
#: the shortest timeout (seconds) and the longest wait of any setting
MIN_TIMEOUT_S, MAX_WAIT_S = 0.1, 3600


class ServeSettings(EntrySettings):
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
    keep_alive_s: Annotated[float, Field(ge=MIN_TIMEOUT_S, le=MAX_WAIT_S)] = 5.0
    request_read_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S, le=MAX_WAIT_S)] = 15.0
    max_connections: Annotated[int, Field(ge=1, le=100_000)] = 1000
    max_request_s: Annotated[float, Field(ge=MIN_TIMEOUT_S, le=MAX_WAIT_S)] = 60.0
    retry_after_s: Annotated[int, Field(ge=0, le=MAX_WAIT_S)] = 1
    drain_timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S, le=MAX_WAIT_S)] = 30.0

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
        self._address()
        self._model_file()

    def _model_file(self) -> None:
        path = Path(self.model_path)
        if not path.is_file():
            raise UserError(
                f"model_path={self.model_path} is not a file; pass a model.onnx from "
                "src/export.py or a .ckpt from src/train.py"
            )
        if path.suffix not in (".onnx", ".ckpt"):
            raise UserError(f"model_path={self.model_path}: expected a .onnx or a .ckpt file")
        if path.suffix == ".ckpt":
            from litlab.config.checks import check_checkpoint

            check_checkpoint(path, None, trust=False)

    def _address(self) -> None:
        """The service can listen here: a valid local address and a free port (told now, not
        after 'serving' was printed)."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            if self.host.replace(".", "").isdigit():  # a mistyped IPv4 address: no DNS query
                raise UserError(
                    f"host={self.host} is not an IP address; use 127.0.0.1 (this machine "
                    "only) or 0.0.0.0 (every interface)"
                )
            try:
                socket.getaddrinfo(self.host, None)
            except OSError:
                raise UserError(
                    f"host={self.host} is not an IP address or a known host name; use "
                    "127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
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


FIELDS = tuple(ServeSettings.model_fields)


def from_config(cfg) -> ServeSettings:
    """The serve settings of a composed config (configs/serve.yaml), checked once, or one line."""
    from litlab.config.validate import entry_config

    return entry_config(cfg, ServeSettings)
