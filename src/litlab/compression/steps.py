"""The steps a compression chain is made of. Each takes the current `Stage` (a model with the
run config that rebuilds it) and returns the next; trainings run in Lightning with the
compress command's trainer, callbacks and logger, so they checkpoint and resume like train.py.
Graph nets are exported and quantized as `src/export.py formats=[onnx_int8]` does it: the
kind's export Spec (inputs, dynamic axes, calibration graphs), graph caches dropped and
pooling sized symbolically (`prepare_net`), only the op types the kind quantizes well."""

import copy
import logging
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from omegaconf import OmegaConf

from litlab import tasks
from litlab.compression import distill, measure, prune
from litlab.console import FILE_ONLY
from litlab.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class Stage:
    name: str
    model: Any  # the LitModule (after quantize: the fp32 model the int8 file came from)
    run_cfg: dict  # the run config that rebuilds `model` (stored in its checkpoint)
    onnx: Path | None = None
    quantized: bool = False
    source_onnx: Path | None = None  # after quantize: the fp32 file it was quantized from


def rebuild_student(run_cfg: dict, dm, state_dict: dict | None = None):
    from litlab.config import build

    model = build.model(OmegaConf.create(run_cfg), dm)
    if state_dict is not None:
        model.load_state_dict(state_dict)
    return model


def training_config(cfg, run_cfg: dict, index: int):
    """The config of a training inside step `index`: this command's trainer, callbacks and
    logger around the stage's model and data. Its checkpoints store it: `ckpt_path=last`
    resumes the step, eval.py tests the model."""
    merged = OmegaConf.to_container(cfg, resolve=False)
    merged |= {"model": run_cfg["model"], "data": run_cfg["data"], "compress_step": index}
    return OmegaConf.create(OmegaConf.to_container(OmegaConf.create(merged), resolve=True))


def fit(module, train_cfg, dm, callbacks=(), resume: Path | None = None, best: bool = True):
    """Train with a Trainer from `litlab.config.build`; then hold the best weights (by the
    model's monitor) unless `best` is false."""
    from litlab.checkpointing.run_config import RunConfigInCheckpoint
    from litlab.config import build
    from litlab.runs.summary import NAME, SplitFile

    # its checkpoints carry the step's config, as train.py's do (resume, eval.py, load_run);
    # data_split.json names the items of each split, as train.py's run dir does
    stored = RunConfigInCheckpoint(OmegaConf.to_container(train_cfg, resolve=True))
    split = SplitFile(Path(train_cfg.paths.output_dir) / NAME)
    trainer = build.trainer(train_cfg, extra_callbacks=[stored, split, *callbacks])
    trainer.fit(module, datamodule=dm, ckpt_path=resume, weights_only=True)
    path = getattr(trainer.checkpoint_callback, "best_model_path", "")
    if best and path:
        from litlab.checkpointing.load import load

        module.load_state_dict(load(path)["state_dict"])
    return module.cpu()


def _fine_tune_optimizer(run_cfg: dict, lr, epochs: int) -> None:
    """The stage's optimizer for a fine-tuning of `epochs`: a given `lr`, the schedule's span."""
    model = run_cfg["model"]
    if lr is not None:
        model["optimizer"]["lr"] = lr
    if (model.get("scheduler") or {}).get("T_max") is not None:
        model["scheduler"]["T_max"] = epochs  # a cosine schedule over the fine-tuning


def prune_step(stage: Stage, cfg, step, dm, index: int, resume: dict | None) -> Stage:
    ratio = float(step.ratio)
    run_cfg = copy.deepcopy(stage.run_cfg)
    _fine_tune_optimizer(run_cfg, step.get("lr"), cfg.trainer.max_epochs)
    callbacks = []
    if step.method == "structured":
        if resume:  # the pruned shapes are in the interrupted fine-tuning's checkpoint
            run_cfg["model"] = resume["model"]
            model = rebuild_student(run_cfg, dm)
        elif not tasks.of(dm).batched_tensor:  # PyG message passing
            model = graph_structured(stage, run_cfg, step, dm)
        else:
            tasks.of(dm).refuse_compression("prune_structured")
            net, example = stage.model.net, (measure.example(dm),)
            options = (step.round_to, step.importance_norm, dm.dims.get("num_classes"))
            prune.check_reachable(net, example, ratio, *options)  # after another step: its net
            shapes = prune.structured(net, example, ratio, step.steps, *options)
            run_cfg["model"]["net"] = prune.pruned_net_config(run_cfg["model"]["net"], shapes)
            model = rebuild_student(run_cfg, dm)
            prune.check_rebuilds(net, model.net)
            model.load_state_dict(stage.model.state_dict())
    elif step.method == "unstructured":
        model = rebuild_student(run_cfg, dm, stage.model.state_dict())
        callbacks.append(prune.unstructured_callback(ratio, cfg.trainer.max_epochs))
    train_cfg = training_config(cfg, run_cfg, index)
    # unstructured: the last epoch's weights hold the final sparsity (earlier ones less)
    model = fit(
        model, train_cfg, dm, callbacks, resume and resume["path"], best=step.method == "structured"
    )
    return Stage("prune", model, run_cfg)


def candidate(run_cfg: dict, model_cfg: dict, dm):
    """A model built only to be measured (its shape, its parameter count): quietly (no
    "Instantiating" line per candidate) and outside the run's random stream, so that trying
    candidates never changes the weights the run itself draws next."""
    quiet = logging.getLogger("litlab.config.build")
    level, quiet.level = quiet.level, logging.WARNING
    try:
        with torch.random.fork_rng(devices=[]):
            return rebuild_student({**run_cfg, "model": model_cfg}, dm)
    finally:
        quiet.setLevel(level)


def _gnn(run_cfg: dict, dm, width: int):
    """The run's GNN with `hidden_channels=width` (fresh weights)."""
    model_cfg = {**run_cfg["model"], "net": {**run_cfg["model"]["net"], "hidden_channels": width}}
    return candidate(run_cfg, model_cfg, dm).net.eval()


def own_pruning(net, net_cfg: dict):
    """A graph net prunes itself (its `prune_plan` and `pruned`: Torch-Pruning's trace does not
    follow PyG's message passing); one line for a graph net that cannot."""
    if getattr(net, "prune_plan", None) is None:
        raise UserError(
            f"compress.prune.method=structured prunes graph nets that prune themselves (e.g. "
            f"litlab.domains.graph.nets.GNN); this checkpoint's net is "
            f"{net_cfg.get('_target_')}: use compress.prune.method=unstructured"
        )
    return net


def check_graph_prune(stage: Stage, step, dm) -> None:
    """compress.prune on a graph net: one line now, before anything is measured or written,
    if its ratio would leave the hidden layers without channels (or the net has none)."""
    if step.method == "structured" and not tasks.of(dm).batched_tensor:
        net_cfg = stage.run_cfg["model"]["net"]
        build = partial(_gnn, stage.run_cfg, dm)
        net = own_pruning(stage.model.net, net_cfg)
        net.prune_plan(net_cfg, build, float(step.ratio), step.round_to)


def graph_structured(stage: Stage, run_cfg: dict, step, dm):
    """A GNN with a smaller `hidden_channels` holding the kept channels (its own `pruned`);
    `run_cfg` is changed to rebuild it."""
    net_cfg = run_cfg["model"]["net"]
    net, width = own_pruning(stage.model.net.eval(), net_cfg).pruned(
        net_cfg,
        partial(_gnn, run_cfg, dm),
        float(step.ratio),
        step.steps,
        step.round_to,
        step.importance_norm,
    )
    run_cfg["model"]["net"] = {**net_cfg, "hidden_channels": width}
    model = rebuild_student(run_cfg, dm)
    model.net.load_state_dict(net.state_dict())
    return model


def student_config(step, teacher_model_cfg: dict, run_cfg: dict, dm) -> dict:
    """The student's model config: a full model config (`_target_`) as given; else keys merged
    onto the teacher's (none: the teacher's own), narrowed until it has at most
    `max_params_ratio` of the teacher's parameters (litlab.compression.distill). One taken
    as given may not have more parameters than its teacher (one line)."""
    from litlab.compression.distill import fitting_student, smaller_student

    given = step.get("student")
    student = OmegaConf.to_container(given, resolve=True) if given is not None else {}
    ratio = step.get("max_params_ratio")
    if "_target_" not in student:
        student = OmegaConf.to_container(OmegaConf.merge(teacher_model_cfg, student), resolve=True)
        if ratio is not None:
            count = partial(_parameters, run_cfg, dm)
            return fitting_student(teacher_model_cfg, student, count, ratio)
    smaller_student(student, teacher_model_cfg, partial(_parameters, run_cfg, dm))  # no wider
    return student


def _parameters(run_cfg: dict, dm, model_cfg: dict) -> int:
    """The parameters of the model `model_cfg` builds for this data."""
    return sum(p.numel() for p in candidate(run_cfg, model_cfg, dm).parameters())


def check_teacher(teacher: Stage, run_cfg: dict, dm) -> None:
    """One line when the teacher solves another task or predicts other classes."""
    import hydra

    def task(c):
        return hydra.utils.get_class(c["data"]["_target_"]).kind

    distill.check_teacher_fits(
        task(teacher.run_cfg),
        getattr(teacher.model, "num_classes", None),
        task(run_cfg),
        dm.dims.get("num_classes"),
    )


def distill_step(
    stage: Stage, cfg, step, dm, index: int, resume: dict | None, teacher: Stage | None = None
) -> Stage:
    """`teacher`: another run's model (compress.distill.teacher); else the current stage."""
    teacher = teacher or stage
    check_teacher(teacher, stage.run_cfg, dm)
    run_cfg = copy.deepcopy(stage.run_cfg)
    run_cfg["model"] = student_config(step, teacher.run_cfg["model"], run_cfg, dm)
    optimizer = run_cfg["model"].get("optimizer") or {}  # a model config without one: as is
    if step.get("student") is None and "lr" in optimizer:  # the default student: the kind's lr
        optimizer["lr"] *= tasks.of(dm).distill_lr_factor
    _fine_tune_optimizer(run_cfg, None, cfg.trainer.max_epochs)
    student = rebuild_student(run_cfg, dm)
    if step.get("student") is None:
        inherit_channels(teacher, student, run_cfg, dm)
    temperature = step.temperature
    if temperature is None:
        temperature = tasks.of(dm).distill_temperature
    distiller = distill.Distiller(student, teacher.model, step.alpha, temperature)
    with warnings.catch_warnings():  # the frozen teacher is in eval mode on purpose
        warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
        fit(distiller, training_config(cfg, run_cfg, index), dm, resume=resume and resume["path"])
    return Stage("distill", student.cpu(), run_cfg)


def inherit_channels(teacher: Stage, student, run_cfg: dict, dm=None) -> None:
    """The default student starts from its teacher's most important channels (ranked as
    structured pruning ranks them), then learns from the teacher: prune, then distill, as NVIDIA's
    Minitron does. Its epochs (the kind's `compress_epochs`, 5: a fine-tuning) then refine a
    net that already segments or classifies; narrowed from scratch, a student needs its
    teacher's whole training. A GNN narrowed from scratch is a lottery on a graph like Cora,
    where 1,433 input features leave a quarter of the parameters 3 hidden channels: at seeds
    1, 2, 3 its test accuracy ended at 0.67, 0.68 and 0.78 of the teacher's 0.80; a phantoms
    UNet3D student (8-epoch teacher, Dice 0.95) never found the small nodule in 5 epochs and
    ended at 0.50 (53%). A student of another net (ResNet-18's small CNN) starts at random."""
    mine, theirs = run_cfg["model"]["net"], teacher.run_cfg["model"]["net"]
    copy_kept = getattr(teacher.model.net, "copy_kept", None)  # a net that prunes itself
    if copy_kept is not None:
        same = {k: v for k, v in mine.items() if k not in ("hidden_channels", "dropout")} == {
            k: v for k, v in theirs.items() if k not in ("hidden_channels", "dropout")
        }
        if same:
            copy_kept(student.net)
    elif mine.get("_target_") == theirs.get("_target_") and tasks.of(dm).batched_tensor:
        if prune.copy_kept_channels(teacher.model.net, student.net, (measure.example(dm),)):
            log.info("the student starts from its teacher's strongest channels", extra=FILE_ONLY)
        else:
            log.warning(
                "compress=distill: the student starts from random weights (Torch-Pruning could "
                "not map the teacher's channels onto it)"
            )


def quantize_step(stage: Stage, cfg, step, dm, out: Path, index: int) -> Stage:
    """The stage's net as an int8 ONNX file, quantized as src/export.py quantizes its kind."""
    from litlab.export.quantize import quantize_int8

    kind, fp32 = tasks.of(dm), out / f"{index}_fp32.onnx"
    kind.refuse_compression("quantize")
    if kind.batched_tensor:
        source = stage.onnx or measure.export_measured(stage.model, dm, fp32, stage.run_cfg)
        batches = measure.calibration(dm, step.calibration_batches)
    else:  # as export.py quantizes graphs
        spec = _spec(stage.model, dm)
        source = _export_graph_net(stage.model, spec, dm, fp32, stage.run_cfg)
        batches = spec.calibration(step.calibration_batches)
    q = quantize_int8(
        source,
        batches,
        out / f"{index}_quantize.onnx",
        per_channel=step.per_channel,
        op_types=kind.int8_op_types,  # as src/export.py quantizes this kind
    )
    read_once = Path(source) if kind.batched_tensor else None  # see recipe._fp32_read_once
    return Stage(
        "quantize", stage.model, stage.run_cfg, onnx=Path(q), quantized=True, source_onnx=read_once
    )


# ------------------------------------------------------------------ int8
def _spec(model, dm):
    return tasks.of(dm).export_spec(SimpleNamespace(model=model, datamodule=dm))


def _export_graph_net(model, spec, dm, path: Path, run_cfg: dict) -> Path:
    """A graph net's fp32 ONNX file beside the run's checkpoints, with the run it scores on
    named in its metadata (eval.py model_path=)."""
    from litlab.compression.measure import file_metadata
    from litlab.export.onnx import export_onnx
    from litlab.export.recipe import prepare_net

    copied = SimpleNamespace(net=copy.deepcopy(model.net))  # the model keeps its cache
    return export_onnx(
        prepare_net(copied, tasks.of(dm)),
        spec.example,
        path,
        input_names=spec.input_names,
        dynamic=spec.dynamic,
        metadata=file_metadata(run_cfg, dm, spec.input_names),
    )


def graph_latency(model, dm, files: dict, budget_s: float) -> dict:
    """{"onnx_fp32_b1": ms, "onnx_b1": ms}: one whole input (the graph, or a test batch of
    graphs) per call, as export times graph nets."""
    spec = _spec(model, dm)
    return measure.latency(None, files, lambda b: spec.example, (1,), budget_s)
