"""Test a checkpoint and write per-sample predictions: `python src/eval.py ckpt_path=PATH`.

The checkpoint carries the config of the run that wrote it, so the data split and the model
are rebuilt exactly; the metrics equal the ones train.py printed for the same checkpoint.
Outputs go to logs/eval/runs/<timestamp>/ (metrics.json, predictions.csv).
"""
import hydra
from omegaconf import DictConfig

from litlab import cli
from litlab.config import resolvers  # noqa: F401  (cheap; registers config resolvers)


def evaluate(cfg: DictConfig) -> dict[str, float]:
    from litlab.config import validate

    validate.eval_config(cfg)  # bad input fails here, in one line, before any data is read
    import json
    from pathlib import Path

    from omegaconf import OmegaConf

    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.utils import predictions, report
    from litlab.config import build
    from litlab.checkpointing import load as checkpoint

    report.apply_extras(cfg)
    run_cfg = OmegaConf.create(checkpoint.load(cfg.ckpt_path)[CONFIG_KEY])
    run_cfg.data = OmegaConf.merge(run_cfg.data, cfg.data_overrides)
    datamodule = build.datamodule(run_cfg)
    model = build.model(run_cfg, datamodule)
    trainer = hydra.utils.instantiate(cfg.trainer, logger=False, callbacks=[])

    run = trainer.test if cfg.split == "test" else trainer.validate
    metrics = run(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)[0]
    out = Path(cfg.paths.output_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if cfg.predictions:  # the model now holds the checkpoint's weights
        datamodule.predict_split = cfg.split
        batches = trainer.predict(model, datamodule=datamodule)
        rows = predictions.write_csv(batches, out / "predictions.csv")
        print(f"wrote {rows} predictions to {out / 'predictions.csv'}")
    report.summary(cfg, metrics, cfg.ckpt_path)
    return metrics


@hydra.main(version_base="1.3", config_path="../configs", config_name="eval")
@cli.task
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    cli.run(main)
