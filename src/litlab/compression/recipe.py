"""The compress recipe: rebuild a run from its checkpoint, apply the chosen steps in order
(prune, distill, quantize), and measure the original and every step into a report
(compress_report.json: all numbers; compress_report.md: the table a README can show).

A chain is judged by the task kind's metric (`Kind.compress_metric`: segmentation's Dice, not
the monitor) and the int8 file's allowed loss. The bad settings of the first steps (a pruning
ratio that would empty layers, a student larger than its teacher) are refused before the
original is measured: its checkpoint is finished work, and a run dir holding one is kept."""

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from litlab import tasks
from litlab.checkpointing.trust import shown
from litlab.errors import UserError

#: keys of a compress run's stored config that are not this command's to match: where things
#: are, what only the command line says (trust, callbacks, logger: built, never from a file),
#: and the step's own model and data (rebuilt from the checkpoint itself)
FREE = tuple(
    (k,)
    for k in (
        *("paths", "hydra", "extras", "tags", "task_name", "threads", "ckpt_path"),
        *("trust_checkpoint", "callbacks", "logger", "model", "data", "compress_step"),
    )
)
#: what a resumed step takes from its run unless this command sets it otherwise
ROOTS = ("compress", "seed", "data_overrides", "trainer", "report")
TARGETS = {"trainer": (("lightning.pytorch", "Trainer"),)}


def _resumed(cfg: DictConfig) -> tuple[DictConfig, dict | None]:
    """`ckpt_path=last` (or the last.ckpt of a compress run's training): the run's own steps,
    source checkpoint, data overrides, seed, trainer and report settings (where this command
    sets none; one it sets otherwise is refused), and which step resumes from which
    checkpoint. Callbacks and logger come from the command line, as with train.py."""
    from litlab.checkpointing import atomic_io as links
    from litlab.checkpointing.load import load
    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.checkpointing.trust import check_callback_states, check_is_data

    source = str(cfg.ckpt_path)
    ckpt = load(cfg.ckpt_path, mmap=True)  # one line if not litlab's
    stored = ckpt[CONFIG_KEY]
    if not cfg.get("trust_checkpoint"):  # its steps, model and source are built from it
        check_is_data(stored, source)
    check_callback_states(ckpt, source)  # a resumed fine-tuning restores them
    if stored.get("task_name") != "compress" or "compress_step" not in stored:
        return cfg, None  # (`load` refused a stored config that is no mapping)
    check_is_data(stored, source)  # a resume file is data, trusted or not: plain values
    links.check_links(Path(cfg.paths.output_dir))  # it writes there: no way out
    step, model = stored["compress_step"], stored.get("model")
    _own_settings(cfg, stored, source)
    if type(step) is not int or not 1 <= step <= len(cfg.compress) or not isinstance(model, dict):
        raise UserError(
            f"ckpt_path={shown(source, 200)}: its compress_step={shown(step)} is not "
            f"a step of its chain {list(cfg.compress)}, or it holds no model; it is not a "
            "checkpoint compress.py wrote"
        )
    print(
        f"resuming step {step} ({list(cfg.compress)[step - 1]}) of the compress run of "
        f"{cfg.ckpt_path}",
        flush=True,
    )
    return cfg, {"path": source, "step": step, "model": model}


def _own_settings(cfg: DictConfig, stored: dict, source: str) -> None:
    """The run's settings into `cfg` (`run_settings.adopt`), its source checkpoint as
    `ckpt_path`, all checked again as this command's own: a bad one is the file's, said so."""
    from litlab.checkpointing import resume as run_settings
    from litlab.config import validate

    run_settings.adopt(cfg, stored, source, ROOTS, TARGETS, free=FREE)
    theirs = stored.get("ckpt_path")
    if not isinstance(theirs, str) or not theirs.endswith(".ckpt"):
        raise UserError(
            f"ckpt_path={shown(source, 200)}: its ckpt_path={shown(theirs)} is not a checkpoint "
            "file; it is not a checkpoint compress.py wrote"
        )
    with open_dict(cfg):
        if isinstance(stored.get("compress"), dict):  # whole: its keys are the chain's order
            cfg.compress = stored["compress"]
        cfg.ckpt_path = theirs
    try:
        validate.check(cfg, "compress")
    except UserError as err:
        raise UserError(f"ckpt_path={shown(source, 200)}: the run to resume has {err}") from None


def compress(cfg: DictConfig) -> list[dict]:
    """Run the chain; returns the report's rows (original first)."""
    from litlab.checkpointing.resume import resolve_checkpoint
    from litlab.config import validate
    from litlab.config.after_training import CompressSettings

    if not OmegaConf.is_missing(cfg, "ckpt_path"):  # unset: validate.check says so
        resolve_checkpoint(cfg)  # ckpt_path=last|<run dir>: that run's last.ckpt
    validate.check(cfg, "compress")  # one line, exit 2, no data read; steps vs task kind
    cfg, resume = _resumed(cfg)
    if cfg.trainer.get("max_epochs") is None:  # the kind's number (node classification: 400)
        from litlab.config.checkpoints import stored_config

        with open_dict(cfg):
            cfg.trainer.max_epochs = CompressSettings.kind_epochs(stored_config(cfg.ckpt_path))
    import lightning as L
    import torch

    from litlab.compression import steps
    from litlab.runs import summary as run_report
    from litlab.runs.rebuild import load_run

    run_report.apply_extras(cfg)  # the header: steps, threads, run dir
    out = Path(cfg.paths.output_dir)
    trust, data_dir = bool(cfg.get("trust_checkpoint")), cfg.paths.data_dir

    def loaded(name: str, path, overrides=None):
        """The stage of the run that wrote `path`, and that run's datamodule."""
        run = load_run(path, overrides, trust=trust, data_dir=data_dir)
        return steps.Stage(name, run.model, OmegaConf.to_container(run.config)), run.datamodule

    stage, dm = loaded("original", cfg.ckpt_path, dict(cfg.data_overrides))
    L.seed_everything(cfg.seed, workers=True)
    metric = judged_by(dm, stage.run_cfg["model"]["monitor"])
    higher = higher_better(dm, stage.run_cfg["model"])
    context = {
        "source": str(cfg.ckpt_path),
        "steps": list(cfg.compress),
        "unstructured": "prune" in cfg.compress and cfg.compress.prune.method == "unstructured",
        "threads": torch.get_num_threads(),
    }
    teacher = None
    if "distill" in cfg.compress and cfg.compress.distill.get("teacher"):
        # another run teaches this run's data
        teacher = loaded("teacher", cfg.compress.distill.teacher)[0]
        steps.check_teacher(teacher, stage.run_cfg, dm)  # before anything is measured
    if "prune" in cfg.compress and not resume:  # a ratio no graph net can reach: one line now
        steps.check_graph_prune(stage, cfg.compress.prune, dm)
    precheck(stage, teacher, cfg, dm)  # the first checkpoint makes a run dir to keep
    rows = [_measure(stage, cfg, dm, out, 0, metric)]
    for index, name in enumerate(cfg.compress, start=1):
        step, done = cfg.compress[name], out / f"{index}_{name}.ckpt"
        here = resume if resume and resume["step"] == index else None
        if name == "quantize":
            stage = steps.quantize_step(stage, cfg, step, dm, out, index)
        elif done.is_file():  # finished before an interruption: reuse it
            stage = loaded(name, done, dict(cfg.data_overrides))[0]
        elif name == "prune":
            stage = steps.prune_step(stage, cfg, step, dm, index, here)
        else:
            stage = steps.distill_step(stage, cfg, step, dm, index, here, teacher)
        rows.append(_measure(stage, cfg, dm, out, index, metric))
        if stage.quantized:  # an int8 file that lost more than allowed is not kept
            read_once = _fp32_read_once(stage, dm, metric)
            judge_int8(rows, metric, step.get("max_drop"), dm, read_once, higher)
        write_compress_report(rows, metric, out, context)
    print((out / "compress_report.md").read_text(), flush=True)
    return rows


def _fp32_read_once(stage, dm, metric: str) -> float | None:
    """The fp32 source file's test metric read as its int8 file is (once per input), where the
    module's own test reads more (test-time mirroring): None where the two agree anyway."""
    if stage.model.test_reads == 1 or stage.source_onnx is None:
        return None
    from litlab.compression import measure

    return measure.onnx_metric(stage.source_onnx, stage.model, dm, metric, stage.run_cfg)


def _measure(stage, cfg, dm, out: Path, index: int, metric: str) -> dict:
    """Test, save (checkpoint and ONNX) and time one stage."""
    from litlab.compression import measure, steps

    tensors = measure.has_tensor_inputs(dm) and tasks.of(dm).batched_tensor
    if stage.quantized:  # the int8 file: scored as a file, no checkpoint of its own
        ckpt, value = None, measure.onnx_metric(stage.onnx, stage.model, dm, metric, stage.run_cfg)
    else:
        ckpt = out / f"{index}_{stage.name}.ckpt"
        value = measure.test_and_save(
            stage.model, stage.run_cfg, dm, ckpt, metric, cfg.trainer.accelerator
        )
        if tensors and cfg.report.onnx:
            onnx = out / f"{index}_{stage.name}.onnx"
            stage.onnx = measure.export_measured(stage.model, dm, onnx, stage.run_cfg)
    files = {"onnx": stage.onnx} if stage.onnx else {}
    lat = {}
    if tensors:  # an int8 stage times its file only (eager torch: the stage it came from)
        net = None if stage.quantized else stage.model.net
        sample = measure.example(dm, 1)[0]
        lat = measure.latency(net, files, sample, cfg.report.batch_sizes, cfg.report.budget_s)
    elif stage.quantized:  # graphs: one whole input per call, the fp32 file against the int8 one
        files = {"onnx_fp32": out / f"{index}_fp32.onnx", **files}
        lat = steps.graph_latency(stage.model, dm, files, cfg.report.budget_s)
    return measure.stage_row(stage, ckpt, value, metric, lat)


# ---------------------------------------------------------------- report
NOTE = (
    "Unstructured pruning only zeroes weights: tensors keep their shapes, so the checkpoint, "
    "the ONNX file and dense kernels stay as big and as slow (compare `nonzero_params` with "
    "`params`); structured pruning removes channels, which shrinks both."
)

COLUMNS = [
    ("stage", "stage"),
    ("params", "params"),
    ("nonzero_params", "non-zero"),
    ("checkpoint_mb", "ckpt MB"),
    ("onnx_mb", "ONNX MB"),
]


def _cell(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4f}" if value < 1 else f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown_table(rows: list[dict], metric: str) -> str:
    """A markdown table: size, metric (and its share of the original's), latencies."""
    lat = sorted(
        {k for r in rows for k in r if k.startswith("latency_ms_")},
        key=lambda k: (not k.startswith("latency_ms_eager"), int(k.rsplit("_b", 1)[1])),
    )
    head = (
        [h for _, h in COLUMNS]
        + [metric, "vs original"]
        + [k.removeprefix("latency_ms_").replace("_b", " b") + " ms" for k in lat]
    )
    ref = rows[0].get(metric)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        share = r.get(metric) / ref if ref and r.get(metric) is not None else None
        cells = (
            [_cell(r.get(k)) for k, _ in COLUMNS]
            + [_cell(r.get(metric)), f"{share:.1%}" if share is not None else "n/a"]
            + [_cell(r.get(k)) for k in lat]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_compress_report(rows: list[dict], metric: str, out: Path, context: dict) -> Path:
    """Write both files (after every step, so an interrupted chain keeps what it measured)."""
    (out / "compress_report.json").write_text(
        json.dumps({"metric": metric, "stages": rows, **context}, indent=2)
    )
    md = [
        f"# Compression report: {context.get('source', '')}",
        "",
        markdown_table(rows, metric),
        "",
        f"Latency: median ms per call on {context.get('threads', '?')} CPU thread(s); "
        "`onnx` = ONNX Runtime." + (" " + NOTE if context.get("unstructured") else ""),
        "",
        *[f"**{r['stage']}**: {r['verdict']}\n" for r in rows if r.get("verdict")],
    ]
    (out / "compress_report.md").write_text("\n".join(md))
    return out / "compress_report.md"


# ---------------------------------------------------------------- checks
def judged_by(datamodule, monitor: str) -> str:
    """`test/<metric>`: the kind's compression metric, else the model's monitor's name."""
    own = tasks.of(datamodule).compress_metric
    return "test/" + (own or str(monitor).split("/", 1)[-1])


def precheck(stage, teacher, cfg, dm) -> None:
    """One line for what the chain's first structured pruning or its distillation would
    refuse, before anything is written."""
    from litlab.compression import measure, prune, steps

    chain = list(cfg.compress)
    first = cfg.compress[chain[0]]
    # graphs are pruned by width: steps.check_graph_prune
    if chain[0] == "prune" and first.method == "structured" and tasks.of(dm).batched_tensor:
        tasks.of(dm).refuse_compression("prune_structured")
        prune.check_reachable(
            stage.model.net, (measure.example(dm),), float(first.ratio), first.round_to,
            first.importance_norm, dm.dims.get("num_classes"),
        )  # fmt: skip
    if "distill" in chain:
        source = teacher or stage
        steps.student_config(cfg.compress.distill, source.run_cfg["model"], stage.run_cfg, dm)


def higher_better(datamodule, model_cfg: dict) -> bool:
    """Whether `judged_by`'s metric grows as the model gets better: the kind's compression
    metric does (Dice); the monitor's is as its monitor_mode says (`val/mae` with `min`)."""
    return bool(tasks.of(datamodule).compress_metric) or model_cfg.get("monitor_mode") != "min"


def judge_int8(
    rows: list[dict],
    metric: str,
    max_drop: float | None,
    dm,
    read_once: float | None = None,
    higher: bool = True,
) -> None:
    """The int8 row against the stage it was quantized from: past the allowed share of its
    metric (compress.quantize.max_drop, else the task kind's) in the worse direction (lower,
    or higher where `higher` is False: an error such as MAE), the file is deleted and the
    row's verdict says why; within it, the verdict says it is kept. `read_once`: that stage's
    fp32 file read as the int8 file is, where its own test reads each input several times
    (test-time mirroring, which no exported file does): the share is taken of it."""
    allowed = max_drop if max_drop is not None else tasks.of(dm).quantize_max_drop
    int8, source = rows[-1], rows[-2]
    before, after = source.get(metric), int8.get(metric)
    if before is None or after is None:
        return
    how = ""
    if read_once is not None:
        how = f" read once as the int8 file is (its own test, with mirrored reads: {before:.4f})"
        before = read_once
    bound = (1 - allowed) if higher else (1 + allowed)
    kept = after >= bound * before if higher else after <= bound * before
    share = after / before if before else float("nan")
    int8["verdict"] = (
        f"int8 {'kept' if kept else 'not kept'}: {metric} {after:.4f} is {share:.1%} of "
        f"the {source['stage']} stage's {before:.4f}{how} (allowed: {'>=' if higher else '<='} "
        f"{bound:.0%}, compress.quantize.max_drop={allowed:g})"
    )
    if not kept:
        Path(int8["onnx"]).unlink(missing_ok=True)
        int8["onnx"] = None
        int8["verdict"] += (
            f"; the file is deleted, {source['stage']}'s fp32 files are the ones to use"
        )
    print(int8["verdict"], flush=True)
