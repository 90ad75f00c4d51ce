"""What a compression chain is judged by and what it refuses before it starts: the task
kind's metric (`Kind.compress_metric`: segmentation's Dice, not the monitor), the int8
file's allowed loss, and the bad settings of the first steps (a pruning ratio that would empty
layers, a student larger than its teacher: `students.smaller_student`), found before the
original is measured: its checkpoint is finished work, and a run dir holding one is kept."""

from pathlib import Path

from litlab import tasks


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
    graph = not tasks.of(dm).batched_tensor
    if chain[0] == "prune" and first.method == "structured" and not graph:
        tasks.of(dm).refuse_compression("prune_structured")
        num_classes = dm.dims.get("num_classes")
        example = (measure.example(dm),)
        prune.check_reachable(
            stage.model.net, example, float(first.ratio), first.round_to,
            first.importance_norm, num_classes,
        )  # fmt: skip
    if "distill" in chain:
        source = teacher or stage
        steps.student_config(cfg.compress.distill, source.run_cfg["model"], stage.run_cfg, dm)


def judge_int8(
    rows: list[dict], metric: str, max_drop: float | None, dm, read_once: float | None = None
) -> None:
    """The int8 row against the stage it was quantized from: past the allowed share of its
    metric (compress.quantize.max_drop, else the task kind's), the file is deleted and the
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
    kept = after >= (1 - allowed) * before
    share = after / before if before else float("nan")
    int8["verdict"] = (
        f"int8 {'kept' if kept else 'not kept'}: {metric} {after:.4f} is {share:.1%} of "
        f"the {source['stage']} stage's {before:.4f}{how} (allowed: >= {1 - allowed:.0%}, "
        f"compress.quantize.max_drop={allowed:g})"
    )
    if not kept:
        Path(int8["onnx"]).unlink(missing_ok=True)
        int8["onnx"] = None
        int8["verdict"] += (
            f"; the file is deleted, {source['stage']}'s fp32 files are the ones to use"
        )
    print(int8["verdict"], flush=True)
