"""The settings of `python src/serve.py` (configs/serve.yaml), with their bounds and the checks
of what they name (the model file, an address this machine can listen on): checked by
`config.validate.entry_config` before anything is printed; `serving.server.serve` receives them
as one `ServeSettings`."""

import ipaddress
import socket
from pathlib import Path
from typing import Annotated, Literal

from litlab.bounds import Ge, Interval, NonNegFloat, PosInt
from litlab.config.settings import EntrySettings
from litlab.errors import UserError

Port = Annotated[int, Interval(ge=1, le=65535), "a port in [1, 65535]"]


class ServeSettings(EntrySettings):
    #: a model.onnx from src/export.py, or a checkpoint (exported first)
    model_path: str
    host: str = "127.0.0.1"
    port: Port = 8000
    workers: PosInt = 1
    threads: PosInt = 1
    max_batch: PosInt = 64
    max_body_bytes: Annotated[int, Ge(1024), "a number of bytes >= 1024"] = 8 << 20
    batching: bool = True
    max_wait_ms: Annotated[NonNegFloat, Interval(le=1000), "milliseconds in [0, 1000]"] = 1.0
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "warning"

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
