"""Run the service: uvicorn on an exported ONNX file (a checkpoint is exported first), with
the settings of litlab.config.after_training.ServeSettings. SIGTERM and Ctrl-C stop accepting,
answer every request already accepted (within drain_timeout_s), close the port and exit 0
(uvicorn would re-raise the signal after its graceful shutdown, killing the process with its
status).

uvicorn's httptools protocol gets the connection limits it lacks, answered with the API's JSON
error shape: a header size limit (431), a request-read timeout from the first byte to the last
of each request (408: slowloris, bodies shorter than their Content-Length), an idle timeout
from the connection's start (uvicorn's keep-alive timer starts only after a first response),
pipelined requests answered after the client's half-close, a maximum of open connections (503
with Retry-After, then closed: file descriptors stay available), malformed HTTP as a JSON 400,
and a drain that lets a request whose head is half received finish instead of resetting it."""

import json
import os
from http import HTTPStatus
from pathlib import Path

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from litlab.compat.uvicorn import forget_captured_signals
from litlab.config.after_training import ServeSettings
from litlab.errors import UserError

PROTOCOL = "litlab.serving.server:GuardedProtocol"


class DrainingServer(uvicorn.Server):
    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        forget_captured_signals(self)  # shut down gracefully, then exit 0


def model_file(model_path, export_dir) -> Path:
    """The ONNX file to serve: `model_path` itself, or exported from a checkpoint into
    `export_dir` (verified like src/export.py; a failed verification stops here)."""
    path = Path(model_path)
    if not path.is_file():
        raise UserError(
            f"model_path={model_path} is not a file; pass a model.onnx from "
            "src/export.py or a .ckpt from src/train.py"
        )
    if path.suffix == ".onnx":
        return path
    if path.suffix != ".ckpt":
        raise UserError(f"model_path={model_path}: expected a .onnx or a .ckpt file")
    from litlab.export.recipe import export_checkpoint

    print(f"exporting {path} to ONNX first")
    report = export_checkpoint(path, export_dir, formats=["onnx"], latency={"batch_sizes": []})
    if not report["ok"]:
        raise UserError(f"the export of {path} failed verification; see {export_dir}")
    return Path(export_dir) / "model.onnx"


def uvicorn_config(app, settings: ServeSettings, **extra) -> uvicorn.Config:
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        http=PROTOCOL,
        timeout_keep_alive=settings.keep_alive_s,
        timeout_graceful_shutdown=settings.drain_timeout_s,
        backlog=min(2048, settings.max_connections * 2),
        lifespan="on",
        **extra,
    )
    config.litlab_settings = settings  # read by GuardedProtocol
    return config


def serve(model_path, export_dir, settings: ServeSettings) -> None:
    from litlab.serving.app import create_app
    from litlab.serving.runner import Runner

    path, s = model_file(model_path, export_dir), settings
    if s.workers == 1:
        config, where = uvicorn_config(create_app(path, s), s), "docs: /docs"
    else:  # processes of their own: each builds its app (uvicorn's supervisor)
        Runner(path, s.threads)  # the file is checked here, once, before anything listens
        os.environ["LITLAB_SERVE"] = json.dumps([str(path), s.model_dump()])
        config = uvicorn_config("litlab.serving.server:app_from_env", s, factory=True)
        config.workers, where = s.workers, f"{s.workers} workers"
    print(f"serving {path} on http://{s.host}:{s.port} ({where})", flush=True)
    print(f"run dir {export_dir}  (log: serve.log)", flush=True)
    server = DrainingServer(config)
    if s.workers == 1:
        server.run()
    else:
        from uvicorn.supervisors import Multiprocess

        Multiprocess(config, target=server.run, sockets=[config.bind_socket()]).run()
    print("stopped", flush=True)


def app_from_env():
    from litlab.serving.app import create_app

    path, settings = json.loads(os.environ["LITLAB_SERVE"])
    return create_app(path, ServeSettings(**settings))


# -------------------------------------------------------------- protocol
def response(status: int, message: str, retry_after: int | None = None) -> bytes:
    body = json.dumps({"error": message}).encode()
    head = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *([f"retry-after: {retry_after}"] if retry_after is not None else []),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class GuardedProtocol(HttpToolsProtocol):
    def __init__(self, config, server_state, app_state, _loop=None):
        super().__init__(config, server_state, app_state, _loop)
        self.limits = config.litlab_settings
        self.head_bytes, self.head_size, self.reading_head = 0, 0, True
        self.read_timer = None
        self.draining = self.refused = False

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        limits = self.limits
        if len(self.connections) > limits.max_connections:
            self.refused = True
            message = (
                f"The server holds its limit of {limits.max_connections} connections; retry later."
            )
            transport.write(response(503, message, limits.retry_after_s))
            if transport.can_write_eof():
                transport.write_eof()  # the client reads the 503; its request is discarded
            self.loop.call_later(1.0, transport.close)
            return
        # idle from the start: a connection that never sends a request is closed too
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.reading_head:
            self.head_bytes += len(data)
        super().data_received(data)
        if (
            self.reading_head
            and self.head_bytes > self.limits.max_header_bytes
            and not self.transport.is_closing()
        ):
            self.too_big()

    def too_big(self) -> None:
        self.reject(
            431,
            f"The request line and headers are larger than the limit of "
            f"{self.limits.max_header_bytes} bytes (serve setting max_header_bytes).",
        )

    def eof_received(self) -> bool | None:
        """The client half-closed (sent all it will send): every request received in full
        is still answered, in order, and the connection closes after the last answer
        (returning None would let the transport close at once, dropping the pipelined ones)."""
        if self.refused:
            self.transport.close()
            return None
        cycle = self.cycle
        if cycle is None or (cycle.response_complete and not self.pipeline):
            return None  # nothing left to answer (a head still incomplete never will be)
        cycle.keep_alive = False  # the last request received: close once it is answered
        return True  # keep the transport open for the answers

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.read_timer is None:
            self.read_timer = self.loop.call_later(
                self.limits.request_read_timeout_s, self.read_timeout
            )

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self.head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self.head_size += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        too_big = self.head_size > self.limits.max_header_bytes
        self.reading_head, self.head_bytes, self.head_size = False, 0, 0
        if too_big:  # a head that arrived in one piece
            self.too_big()
            raise ValueError("headers too large")  # stops the parser; answered already
        super().on_headers_complete()
        if self.draining and self.cycle is not None:
            self.cycle.keep_alive = False

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.reading_head = True
        self.stop_read_timer()

    def connection_lost(self, exc) -> None:
        self.stop_read_timer()
        super().connection_lost(exc)

    def stop_read_timer(self) -> None:
        if self.read_timer is not None:
            self.read_timer.cancel()
            self.read_timer = None

    def read_timeout(self) -> None:
        self.read_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.reading_head and self.cycle.response_started:
            self.transport.close()  # answered already (e.g. a 413 before the body)
            return
        self.reject(
            408,
            f"The request was not received within {self.limits.request_read_timeout_s:g} s "
            "(serve setting request_read_timeout_s).",
        )

    def reject(self, status: int, message: str) -> None:
        """Answer in the JSON error shape and close; a request being handled is abandoned."""
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.response_started:
                self.transport.close()
                return
            self.cycle.disconnected = True  # the app's own answer will not be written
            self.cycle.message_event.set()
        self.transport.write(response(status, message))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        if self.transport.is_closing():  # answered already (a 431 stops the parser so)
            return
        self.reject(
            400, "The request is not valid HTTP/1.1 (request line, header or chunk encoding)."
        )

    def shutdown(self) -> None:
        """Graceful stop: idle connections close now; a request already begun (even one
        whose head is still arriving) is answered, then its connection closes."""
        self.draining = True
        if self.refused:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
        elif not (self.reading_head and self.head_bytes > 0):
            self.transport.close()
