"""The recipes, and nothing else: plain functions of a validated config that the entry points
and the Python API call (`train_and_test`: seed, data, model, trainer, fit, test, report;
`report`: DIR/report.html; eval.py's is litlab.export.evaluate, beside the exported files it
also scores). What every run shares whatever its recipe (its run dir, its end, DDP, its
summary, tuning, `load_run`) is in litlab.runs."""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.config.resolvers import CODE_ROOT
from litlab.runs.run_end import RunResult

#: what DDP child ranks re-run (the same job, its overrides; see litlab.runs.ddp)
ENTRY_POINT = CODE_ROOT / "src" / "train.py"


def train_and_test(cfg: DictConfig) -> RunResult:
    """Train (cfg.train), then test the best checkpoint (cfg.test); writes the run dir."""
    from litlab.checkpointing import resume
    from litlab.config import data_paths, validate
    from litlab.runs import ddp

    resume.resolve_checkpoint(cfg)  # ckpt_path=last|<run dir>: that run's last.ckpt
    # stored absolute, so eval finds the data from any folder; provenance.json keeps the text
    typed = data_paths.absolute(cfg)
    # bad input fails here, in one line, before data is read or any DDP rank starts
    validate.check(cfg, "train")
    # trainer=ddp: the other local ranks start now, importing alongside this one (not at fit)
    with ddp.lifecycle(cfg, ENTRY_POINT) as ranks:
        import lightning as L

        from litlab.checkpointing.run_config import RunConfigInCheckpoint
        from litlab.config import build
        from litlab.runs import run_end, tuning
        from litlab.runs import summary as report
        from litlab.runs.summary import SplitFile

        report.apply_extras(cfg)
        L.seed_everything(cfg.seed, workers=True)
        datamodule = build.datamodule(cfg)
        model = build.model(cfg, datamodule)
        # what the run is made with (code, packages, data): provenance.json, and in checkpoints
        made_with = report.record_provenance(cfg, datamodule, typed)
        # besides the config's callbacks: the run config in every checkpoint (eval, resume and
        # load_run rebuild the run from it), the DDP ranks joining the Trainer
        stored = RunConfigInCheckpoint(OmegaConf.to_container(cfg, resolve=True), made_with)
        # and each item's split, by its source, in data_split.json once the data is split
        split = SplitFile(Path(cfg.paths.output_dir) / report.NAME)
        trainer = build.trainer(cfg, extra_callbacks=[stored, ranks.callback(), split])
        report.log_hyperparameters(cfg, model, trainer)

        if cfg.train:
            tuned = tuning.run_tuners(
                build.instantiate_all(cfg.get("tune"), "tune"), trainer, model, datamodule
            )  # tune=
            tuning.record(stored.config, tuned)  # checkpoints: the values trained with
            with run_end.watched(
                model.net,
                cfg.model.net._target_,
                datamodule=datamodule,
                data_target=cfg.data._target_,
            ):
                trainer.fit(
                    model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True
                )
        # a resume that trained nothing more (stopped during the test) reports the metrics
        # its checkpoint was saved with, as the run that was never stopped does
        metrics = {**report.resumed_metrics(trainer)}
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        checkpoint = report.best_checkpoint(trainer) if cfg.train else cfg.ckpt_path
        if cfg.test:
            # verbose=False: the Results block below says the same, once
            trainer.test(
                model, datamodule=datamodule, ckpt_path=checkpoint, weights_only=True, verbose=False
            )
            metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    report.save_metrics(cfg, metrics)
    report.summary(cfg, metrics, checkpoint)
    return RunResult(metrics, Path(cfg.paths.output_dir), checkpoint)


def report(cfg: DictConfig):
    """Check `path`, write its report.html, print where it is; returns its path."""
    from litlab.config import validate
    from litlab.report import write_report

    settings = validate.check(cfg, "report")
    out = write_report(settings.path)
    print(f"report: {out}", flush=True)
    return out
