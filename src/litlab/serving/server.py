"""Run the service: uvicorn on an exported ONNX file (a checkpoint is exported first).

SIGTERM and Ctrl-C drain in-flight requests, close the port and return normally (exit 0):
uvicorn would re-raise the signal after its graceful shutdown, which kills the process with
the signal's status instead."""

from pathlib import Path

import uvicorn
from omegaconf import DictConfig

from litlab.errors import UserError
from litlab.serving.settings import ServeSettings


class DrainingServer(uvicorn.Server):
    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()  # shut down gracefully, then exit 0


def model_file(model_path, export_dir) -> Path:
    """The ONNX file to serve: `model_path` itself, or exported from a checkpoint into
    `export_dir` (verified like src/export.py; a failed verification stops here)."""
    path = Path(model_path)
    if path.suffix == ".onnx":
        return path
    from litlab.export.recipe import export_checkpoint

    print(f"exporting {path} to ONNX first")
    report = export_checkpoint(path, export_dir, formats=["onnx"], latency={"batch_sizes": []})
    if not report["ok"]:
        raise UserError(f"the export of {path} failed verification; see {export_dir}")
    return Path(export_dir) / "model.onnx"


def serve(cfg: DictConfig) -> None:
    """`python src/serve.py`: the config checked (one line, exit 2, before anything is
    printed), then served until SIGTERM or Ctrl-C."""
    from litlab.config.validate import entry_config

    run_server(entry_config(cfg, ServeSettings), cfg.paths.output_dir)


def run_server(settings: ServeSettings, export_dir) -> None:
    """Serve `settings.model_path`; a checkpoint is exported into `export_dir` first."""
    from litlab.serving.app import create_app

    s = settings
    path = model_file(s.model_path, export_dir)
    app_args = (str(path), s.max_batch, s.batching, s.max_wait_ms, s.threads, s.max_body_bytes)
    if s.workers != 1:  # processes of their own: uvicorn's supervisor builds one app each
        import os

        os.environ["LITLAB_SERVE"] = repr(app_args)
        uvicorn.run(
            "litlab.serving.server:app_from_env",
            factory=True,
            host=s.host,
            port=s.port,
            workers=s.workers,
            log_level=s.log_level,
            timeout_graceful_shutdown=10,
        )
        return
    app = create_app(*app_args)
    config = uvicorn.Config(
        app,
        host=s.host,
        port=s.port,
        log_level=s.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
    print(f"serving {path} on http://{s.host}:{s.port} (docs: /docs)", flush=True)
    DrainingServer(config).run()
    print("stopped", flush=True)


def app_from_env():
    import ast
    import os

    from litlab.serving.app import create_app

    return create_app(*ast.literal_eval(os.environ["LITLAB_SERVE"]))
