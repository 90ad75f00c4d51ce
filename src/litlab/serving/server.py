"""Run the service: uvicorn on an exported ONNX file (a checkpoint is exported first).

SIGTERM and Ctrl-C drain in-flight requests, close the port and return normally (exit 0):
uvicorn would re-raise the signal after its graceful shutdown, which kills the process with
the signal's status instead."""

from pathlib import Path

import uvicorn

from litlab.errors import UserError


class DrainingServer(uvicorn.Server):
    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()  # shut down gracefully, then exit 0


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
    from litlab.export.recipe import export

    print(f"exporting {path} to ONNX first")
    report = export(path, ["onnx"], export_dir, latency_batch_sizes=())
    if not report["ok"]:
        raise UserError(f"the export of {path} failed verification; see {export_dir}")
    return Path(export_dir) / "model.onnx"


def serve(
    model_path,
    export_dir,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    max_batch: int = 64,
    max_body_bytes: int = 8 << 20,
    batching: bool = True,
    max_wait_ms: float = 1.0,
    threads: int = 1,
    log_level: str = "warning",
) -> None:
    from litlab.serving.app import create_app

    path = model_file(model_path, export_dir)
    if workers != 1:  # processes of their own: uvicorn's supervisor builds one app each
        import os

        os.environ["LITLAB_SERVE"] = repr(
            (str(path), max_batch, batching, max_wait_ms, threads, max_body_bytes)
        )
        uvicorn.run(
            "litlab.serving.server:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            timeout_graceful_shutdown=10,
        )
        return
    app = create_app(path, max_batch, batching, max_wait_ms, threads, max_body_bytes)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
    print(f"serving {path} on http://{host}:{port} (docs: /docs)", flush=True)
    print(f"run dir {export_dir}  (log: serve.log)", flush=True)
    DrainingServer(config).run()
    print("stopped", flush=True)


def app_from_env():
    import ast
    import os

    from litlab.serving.app import create_app

    path, max_batch, batching, wait, threads, max_body = ast.literal_eval(
        os.environ["LITLAB_SERVE"]
    )
    return create_app(path, max_batch, batching, wait, threads, max_body)
