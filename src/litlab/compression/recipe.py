"""The compress recipe: rebuild a run from its checkpoint, apply the chosen steps in order
(prune, distill, quantize), and measure the original and every step into a report."""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict


def _resumed(cfg: DictConfig) -> tuple[DictConfig, dict | None]:
    """`ckpt_path=last` (or the last.ckpt of a compress run's training): the steps, source
    checkpoint and data of that run, and which step resumes from which checkpoint. As with
    train.py, trainer/callbacks/logger come from the command line (repeat your overrides)."""
    from omegaconf import open_dict

    from litlab.checkpointing.callback_states import check_callback_states
    from litlab.checkpointing.load import load
    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.checkpointing.trust import check

    ckpt = load(cfg.ckpt_path, mmap=True)  # one line if not litlab's
    stored = ckpt[CONFIG_KEY]
    if not cfg.get("trust_checkpoint"):  # its steps, model and source are built from it
        check(stored, str(cfg.ckpt_path))
    check_callback_states(ckpt, str(cfg.ckpt_path))  # a resumed fine-tuning restores them
    if stored.get("task_name") != "compress" or "compress_step" not in stored:
        return cfg, None
    resume = {"path": str(cfg.ckpt_path), "step": stored["compress_step"], "model": stored["model"]}
    with open_dict(cfg):
        cfg.compress, cfg.ckpt_path = stored["compress"], stored["ckpt_path"]
        cfg.data_overrides, cfg.seed = stored["data_overrides"], stored["seed"]
    print(
        f"resuming step {resume['step']} ({list(cfg.compress)[resume['step'] - 1]}) of the "
        f"compress run of {cfg.ckpt_path}",
        flush=True,
    )
    return cfg, resume


def compress(cfg: DictConfig) -> list[dict]:
    """Run the chain; returns the report's rows (original first)."""
    from litlab.checkpointing.resume import resolve_checkpoint
    from litlab.compression.settings import CompressSettings
    from litlab.config.validate import entry_config

    if not OmegaConf.is_missing(cfg, "ckpt_path"):  # unset: entry_config says so
        resolve_checkpoint(cfg)  # ckpt_path=last|<run dir>: that run's last.ckpt
    entry_config(
        cfg, CompressSettings, "compress"
    )  # one line, exit 2, no data read; steps vs task kind
    cfg, resume = _resumed(cfg)
    if cfg.trainer.get("max_epochs") is None:  # the kind's number (node classification: 400)
        from litlab.config.checks import stored_config

        with open_dict(cfg):
            cfg.trainer.max_epochs = CompressSettings.kind_epochs(stored_config(cfg.ckpt_path))
    import lightning as L
    import torch

    from litlab.compression import report, steps
    from litlab.recipes import report as run_report
    from litlab.recipes.load import load_run

    run_report.apply_extras(cfg)  # the header: steps, threads, run dir
    out = Path(cfg.paths.output_dir)
    trust, data_dir = bool(cfg.get("trust_checkpoint")), cfg.paths.data_dir
    run = load_run(cfg.ckpt_path, dict(cfg.data_overrides), trust=trust, data_dir=data_dir)
    L.seed_everything(cfg.seed, workers=True)
    dm = run.datamodule
    metric = "test/" + str(run.config.model.monitor).split("/", 1)[-1]
    context = {
        "source": str(cfg.ckpt_path),
        "steps": list(cfg.compress),
        "unstructured": "prune" in cfg.compress and cfg.compress.prune.method == "unstructured",
        "threads": torch.get_num_threads(),
    }
    stage = steps.Stage("original", run.model, OmegaConf.to_container(run.config))
    teacher = None
    if "distill" in cfg.compress and cfg.compress.distill.get("teacher"):
        # another run teaches this run's data
        other = load_run(cfg.compress.distill.teacher, trust=trust, data_dir=data_dir)
        teacher = steps.Stage("teacher", other.model, OmegaConf.to_container(other.config))
        steps.check_teacher(teacher, stage.run_cfg, dm)  # before anything is measured
    rows = [_measure(stage, cfg, dm, out, 0, metric)]
    for index, name in enumerate(cfg.compress, start=1):
        step, done = cfg.compress[name], out / f"{index}_{name}.ckpt"
        here = resume if resume and resume["step"] == index else None
        if name == "quantize":
            stage = steps.quantize_step(stage, cfg, step, dm, out, index)
        elif done.is_file():  # finished before an interruption: reuse it
            again = load_run(done, dict(cfg.data_overrides), trust=trust, data_dir=data_dir)
            stage = steps.Stage(name, again.model, OmegaConf.to_container(again.config))
        elif name == "prune":
            stage = steps.prune_step(stage, cfg, step, dm, index, here)
        else:
            stage = steps.distill_step(stage, cfg, step, dm, index, here, teacher)
        rows.append(_measure(stage, cfg, dm, out, index, metric))
        report.write(rows, metric, out, context)
    print((out / "compress_report.md").read_text(), flush=True)
    return rows


def _measure(stage, cfg, dm, out: Path, index: int, metric: str) -> dict:
    """Test, save (checkpoint and ONNX) and time one stage."""
    from litlab.compression import measure

    tensors = measure.has_tensor_inputs(dm)
    if stage.quantized:
        lat = measure.latency(
            None, {"onnx": stage.onnx}, dm, cfg.report.batch_sizes, cfg.report.budget_s
        )
        return measure.stage_row(
            stage.name,
            stage.model.net,
            None,
            stage.onnx,
            measure.onnx_metric(stage.onnx, stage.model, dm, metric),
            metric,
            lat,
        )
    ckpt = out / f"{index}_{stage.name}.ckpt"
    value = measure.test_and_save(
        stage.model, stage.run_cfg, dm, ckpt, metric, cfg.trainer.accelerator
    )
    if tensors and cfg.report.onnx:
        stage.onnx = measure.export(stage.model, dm, out / f"{index}_{stage.name}.onnx")
    lat = (
        measure.latency(
            stage.model.net,
            {"onnx": stage.onnx} if stage.onnx else {},
            dm,
            cfg.report.batch_sizes,
            cfg.report.budget_s,
        )
        if tensors
        else {}
    )
    return measure.stage_row(stage.name, stage.model.net, ckpt, stage.onnx, value, metric, lat)
