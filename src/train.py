"""Train, then test the best checkpoint: `python src/train.py [group=option] [key=value]`.

    python src/train.py                           # CNN on scikit-learn's digits (offline)
    python src/train.py data=mnist model=resnet18 trainer.max_epochs=3 seed=7
    python src/train.py experiment=NAME           # a combination from configs/experiment/
    python src/train.py -m model.optimizer.lr=1e-3,1e-2   # a sweep (multirun)

Only Hydra and OmegaConf are imported before the command line is parsed: `--help` and
`--cfg job` stay fast. torch and lightning are imported inside `train`.
"""
import hydra
from omegaconf import DictConfig

from litlab import cli
from litlab.config import resolvers  # noqa: F401  (cheap; registers config resolvers)


def train(cfg: DictConfig) -> dict[str, float]:
    """The recipe: seed, data, model, trainer, fit, test, report. Returns the final metrics."""
    from litlab.utils import distributed
    from litlab.config import validate

    validate.trainer_config(cfg)  # devices and strategy, before any DDP rank starts
    # trainer=ddp: the other local ranks start now, importing alongside this one (not at fit)
    with distributed.early_ranks(cfg, __file__):
        validate.train_config(cfg)  # bad input fails here, in one line, before data is read
        import lightning as L

        from litlab.utils import report
        from litlab.config import build

        distributed.install(__file__)  # DDP children re-run this job exactly (not the sweep)
        report.apply_extras(cfg)
        L.seed_everything(cfg.seed, workers=True)
        datamodule = build.datamodule(cfg)
        model = build.model(cfg, datamodule)
        trainer = build.trainer(cfg)
        distributed.attach(trainer)
        distributed.describe(trainer, cfg.data.get("batch_size"))
        report.log_hyperparameters(cfg, model, trainer)

        if cfg.train:
            trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path,
                        weights_only=True)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        checkpoint = report.best_checkpoint(trainer) if cfg.train else cfg.ckpt_path
        if cfg.test:
            trainer.test(model, datamodule=datamodule, ckpt_path=checkpoint, weights_only=True)
            metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        distributed.finish(trainer)  # all ranks end together; fails if a child rank failed
    report.save_metrics(cfg, metrics)
    report.summary(cfg, metrics, checkpoint)
    return metrics


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
@cli.task
def main(cfg: DictConfig) -> float | None:
    metrics = train(cfg)
    return metrics.get(cfg.get("optimized_metric"))  # the objective of sweepers


if __name__ == "__main__":
    cli.run(main)
