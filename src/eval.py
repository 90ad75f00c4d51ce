"""Test a checkpoint and write per-sample predictions: `python src/eval.py ckpt_path=PATH`,
or an exported ONNX file on its run's split: `python src/eval.py model_path=FILE.onnx`.

The checkpoint (or the file's metadata) carries the config of the run that wrote it, so the
data split and the model are rebuilt exactly; the metrics equal the ones train.py printed for
the same checkpoint. Outputs go to logs/eval/runs/<timestamp>/ (metrics.json, predictions.csv).
The recipe is `litlab.export.evaluate.evaluate_entry` (also `litlab.evaluate([...])` from Python):
`evaluate_checkpoint` for a checkpoint, the same steps with the file as the net for a model.
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("eval")
def main(cfg: DictConfig) -> None:
    from litlab.export.evaluate import evaluate_entry

    evaluate_entry(cfg)


if __name__ == "__main__":
    cli.run_main(main)
