"""The evaluation recipe as a plain function: test a checkpoint on the split it was trained
with (rebuilt from the config stored inside it) and write metrics.json and predictions.csv.
An exported file (`model_path=`) goes through the same `score`, with the file as the net
(`litlab.export.evaluate`)."""

import contextlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.runs.run_end import RunResult


def evaluate_checkpoint(cfg: DictConfig) -> RunResult:
    """Metrics of `cfg.ckpt_path` on `cfg.split`; the checkpoint is read once (load_run)."""
    from litlab.config import validate
    from litlab.errors import UserError

    # bad input fails here, in one line, before any data is read
    settings = validate.check(cfg, "eval")
    if settings.model_path is not None:
        raise UserError(
            f"model_path={settings.model_path}: an exported file is scored by src/eval.py or "
            "litlab.evaluate (litlab.export.evaluate), not by this checkpoint recipe"
        )
    from litlab.runs import first_forward
    from litlab.runs import summary as report
    from litlab.runs.rebuild import load_run

    report.apply_extras(cfg)
    overrides = OmegaConf.to_container(cfg.data_overrides, resolve=True)
    trust = bool(cfg.get("trust_checkpoint"))
    run = load_run(cfg.ckpt_path, overrides, trust=trust, data_dir=cfg.paths.data_dir)
    from litlab.checkpointing import run_config as provenance

    note = provenance.code_note(run.checkpoint.get(provenance.KEY))
    if note:  # the checkpoint was trained by other code (a later commit, local edits)
        print(note, flush=True)
    watch = first_forward.watched(run.model.net, run.config.model.net._target_)
    return score(cfg, run, str(cfg.ckpt_path), watch)


def score(cfg: DictConfig, run, source: str, watch=None, label: str = "checkpoint") -> RunResult:
    """Test `run` (a `LoadedRun`) on `cfg.split` with the module's own steps and metrics and
    write metrics.json and predictions.csv into the run dir. `source`: what was scored (a
    checkpoint, a model file: `label` says which); `watch`: a context around the test."""
    from litlab.config import build
    from litlab.runs import predictions
    from litlab.runs import summary as report

    trainer = build.trainer(cfg)  # eval.yaml has no callbacks or logger groups: none of either
    evaluate_split = trainer.test if cfg.split == "test" else trainer.validate
    # verbose=False: the Results block of report.summary says the same, once
    with watch or contextlib.nullcontext():
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
    report.summary(cfg, metrics, source, label)
    return RunResult(metrics, out, source if label == "checkpoint" else None)
