"""compress=quantize beyond plain tensor nets, and its verdict.

Graph nets are exported and quantized as `src/export.py formats=[onnx_int8]` does it: the
export Spec of the task kind (inputs, dynamic node/edge/graph axes, calibration graphs from the
training split), graph caches dropped and pooling sized symbolically (`prepare_net`), and only
the op types the kind quantizes well (`Kind.int8_op_types`: the dense layers). The int8
file is then judged by the kind's own test metric (`checks.judge_int8`)."""

import copy
from pathlib import Path
from types import SimpleNamespace


def _spec(model, dm):
    from litlab import tasks

    return tasks.of(dm).export_spec(SimpleNamespace(model=model, datamodule=dm))


def quantize_graph_net(
    model, dm, step, out: Path, index: int, run_cfg: dict | None = None
) -> tuple[Path, Path]:
    """(fp32 ONNX, int8 ONNX) of a graph net, both next to the run's checkpoints; `run_cfg`:
    the run they score on, named in their metadata (eval.py model_path=)."""
    from litlab import tasks
    from litlab.compression.measure import file_metadata
    from litlab.export.onnx import export_onnx
    from litlab.export.quantize import quantize_int8
    from litlab.export.recipe import prepare_net

    spec = _spec(model, dm)
    copied = SimpleNamespace(net=copy.deepcopy(model.net))  # the model keeps its cache
    net = prepare_net(copied, tasks.of(dm))
    fp32 = export_onnx(
        net,
        spec.example,
        out / f"{index}_fp32.onnx",
        input_names=spec.input_names,
        dynamic=spec.dynamic,
        metadata=file_metadata(run_cfg, dm, spec.input_names) if run_cfg is not None else None,
    )
    int8 = quantize_int8(
        fp32,
        spec.calibration(step.calibration_batches),
        out / f"{index}_quantize.onnx",
        per_channel=step.per_channel,
        op_types=tasks.of(dm).int8_op_types,
    )
    return Path(fp32), Path(int8)


def graph_latency(model, dm, files: dict, budget_s: float) -> dict:
    """{"onnx_fp32_b1": ms, "onnx_b1": ms}: one whole input (the graph, or a test batch of
    graphs) per call, as export times graph nets."""
    from litlab.export.verify import measure_latency

    spec = _spec(model, dm)
    rows = measure_latency(None, files, lambda b: spec.example, (1,), budget_s=budget_s)
    return {f"{r['format']}_b{r['batch']}": round(r["p50_ms"], 3) for r in rows}
