"""Train, then test the best checkpoint: `python src/train.py [group=option] [key=value]`.

    python src/train.py                           # CNN on scikit-learn's digits (offline)
    python src/train.py data=mnist model=resnet18 trainer.max_epochs=3 seed=7
    python src/train.py experiment=NAME           # a combination from configs/experiment/
    python src/train.py -m model.optimizer.lr=1e-3,1e-2   # a sweep (multirun)

The recipe is `litlab.recipes.train_and_test` (also `litlab.train([...])` from Python). Only Hydra
and OmegaConf are imported before the command line is parsed: `--help` and `--cfg job` stay fast.
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("train")
def main(cfg: DictConfig) -> float | None:
    from litlab.recipes import train_and_test

    return train_and_test(cfg).metrics.get(cfg.get("optimized_metric"))  # the objective of sweepers


if __name__ == "__main__":
    cli.run_main(main)
