"""Test a checkpoint and write per-sample predictions: `python src/eval.py ckpt_path=PATH`.

The checkpoint carries the config of the run that wrote it, so the data split and the model
are rebuilt exactly; the metrics equal the ones train.py printed for the same checkpoint.
Outputs go to logs/eval/runs/<timestamp>/ (metrics.json, predictions.csv). The recipe is
`litlab.recipes.evaluate.evaluate` (also `litlab.evaluate([...])` from Python).
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("eval")
def main(cfg: DictConfig) -> None:
    from litlab.recipes.evaluate import evaluate

    evaluate(cfg)


if __name__ == "__main__":
    cli.run(main)
