"""Run the service: uvicorn on an exported ONNX file (a checkpoint is exported first), with the
connection limits of litlab.serving.protocol and the settings of litlab.config.entries.ServeSettings.

SIGTERM and Ctrl-C stop accepting, answer every request already accepted (within
drain_timeout_s), close the port and return normally (exit 0): uvicorn would re-raise the
signal after its graceful shutdown, which kills the process with the signal's status."""

import json
import os
from pathlib import Path

import uvicorn

from litlab.compat.uvicorn import forget_captured_signals
from litlab.config.after_training import ServeSettings
from litlab.errors import UserError

PROTOCOL = "litlab.serving.protocol:GuardedProtocol"


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

    path = model_file(model_path, export_dir)
    s = settings
    if s.workers != 1:  # processes of their own: each builds its app (uvicorn's supervisor)
        from uvicorn.supervisors import Multiprocess

        Runner(path, s.threads)  # the file is checked here, once, before anything listens
        os.environ["LITLAB_SERVE"] = json.dumps([str(path), s.model_dump()])
        config = uvicorn_config("litlab.serving.server:app_from_env", s, factory=True)
        config.workers = s.workers
        print(f"serving {path} on http://{s.host}:{s.port} ({s.workers} workers)", flush=True)
        print(f"run dir {export_dir}  (log: serve.log)", flush=True)
        server = DrainingServer(config)
        Multiprocess(config, target=server.run, sockets=[config.bind_socket()]).run()
        print("stopped", flush=True)
        return
    app = create_app(path, s)
    print(f"serving {path} on http://{s.host}:{s.port} (docs: /docs)", flush=True)
    print(f"run dir {export_dir}  (log: serve.log)", flush=True)
    DrainingServer(uvicorn_config(app, s)).run()
    print("stopped", flush=True)


def app_from_env():
    from litlab.serving.app import create_app

    path, settings = json.loads(os.environ["LITLAB_SERVE"])
    return create_app(path, ServeSettings(**settings))
