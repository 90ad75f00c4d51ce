"""The evaluation recipe as a plain function: test a checkpoint on the split it was trained
with (rebuilt from the config stored inside it) and write metrics.json and predictions.csv."""

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.runs.result import RunResult


def evaluate(cfg: DictConfig) -> RunResult:
    """Metrics of `cfg.ckpt_path` on `cfg.split`; the checkpoint is read once (load_run)."""
    from litlab.config import validate

    # bad input fails here, in one line, before any data is read
    validate.check(cfg, "eval")
    from litlab.config import build
    from litlab.recipes import report
    from litlab.recipes.load import load_run
    from litlab.runs import first_forward, predictions

    report.apply_extras(cfg)
    overrides = OmegaConf.to_container(cfg.data_overrides, resolve=True)
    trust = bool(cfg.get("trust_checkpoint"))
    run = load_run(cfg.ckpt_path, overrides, trust=trust, data_dir=cfg.paths.data_dir)
    from litlab.checkpointing import provenance

    note = provenance.code_note(run.checkpoint.get(provenance.KEY))
    if note:  # the checkpoint was trained by other code (a later commit, local edits)
        print(note, flush=True)
    trainer = build.trainer(cfg)  # eval.yaml has no callbacks or logger groups: none of either
    evaluate_split = trainer.test if cfg.split == "test" else trainer.validate
    # verbose=False: the Results block of report.summary says the same, once
    with first_forward.watched(run.model.net, run.config.model.net._target_):
        metrics = evaluate_split(run.model, datamodule=run.datamodule, verbose=False)[0]
    out = Path(cfg.paths.output_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if cfg.predictions:
        run.datamodule.predict_split = cfg.split
        run.model.output_dir = out  # segmentation's predicted masks: masks/ beside the rows
        batches = trainer.predict(run.model, datamodule=run.datamodule)
        # each row named by its source (a CSV row, a file, a volume and slice, a node)
        sources = run.datamodule.sources(cfg.split)
        rows = predictions.write_csv(batches, out / "predictions.csv", sources)
        print(f"wrote {rows} predictions to {out / 'predictions.csv'}")
    report.summary(cfg, metrics, cfg.ckpt_path)
    return RunResult(metrics, out, str(cfg.ckpt_path))
