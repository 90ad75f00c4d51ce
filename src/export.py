"""Export a checkpoint: `python src/export.py ckpt_path=PATH [formats=[onnx,pt2,onnx_int8]]`.

Writes logs/export/runs/<timestamp>/ (model.onnx, model.pt2, model.int8.onnx, export_report.md
and .json); each format is verified against the checkpoint; a failed one makes the exit code 1. An int8
file that loses more than int8_max_drop of the test metric is reported "not written" and
removed (exit 0: the fp32 formats are the artifacts then).
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("export")
def main(cfg: DictConfig) -> None:
    from litlab.export.recipe import export

    if not export(cfg)["ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    cli.run_main(main)
