"""Serve a model over HTTP: `python src/serve.py model_path=PATH [port=8000]`.

PATH is a model.onnx from src/export.py, or a checkpoint, exported (and verified) first.
Binds 127.0.0.1 by default; Ctrl-C or SIGTERM drains in-flight requests and exits 0.
Settings and limits: configs/serve.yaml (checked by litlab.config.validate).
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("serve")
def main(cfg: DictConfig) -> None:
    from litlab.config import validate
    from litlab.serving.server import serve

    settings = validate.check(cfg, "serve")  # one line on bad input, before the model loads
    serve(settings.model_path, cfg.paths.output_dir, settings)


if __name__ == "__main__":
    cli.run_main(main)
