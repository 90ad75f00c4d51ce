"""`python src/export.py ckpt_path=PATH`: rebuild the run, write each format, verify each one
against the checkpoint (outputs and test metric), time them, and write the report.

export_report.md (for people) and export_report.json (for scripts)."""

import hashlib
import json
import math
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab import tasks
from litlab.config.after_training import ExportSettings
from litlab.errors import UserError, one_line

FILES = {
    "onnx": "model.onnx",
    "pt2": "model.pt2",
    "onnx_int8": "model.int8.onnx",
    "tensorrt": "model.trt.ep",
}
# what still works when a format's exporter fails on an op
FALLBACK = {"onnx": "pt2", "pt2": "onnx", "onnx_int8": "onnx"}


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def unsupported(fmt: str, err: Exception) -> str:
    """One line naming the op the exporter could not handle, and a format that works."""
    text = str(err)
    op = re.search(r"(aten::\w+|aten\.\w+(?:\.\w+)?|torch\.ops\.[\w.]+|Op ?type[:=]? ?'?\w+)", text)
    what = f"op {op.group(1)}" if op else one_line(err, limit=200)
    return f"{fmt}: the exporter cannot handle {what}; formats=[{FALLBACK.get(fmt, 'onnx')}] works"


def prepare_net(model, kind):
    """The module's plain net in eval mode, without graph caches (a cached GCN adjacency would
    be baked into the file as a constant of the training graph), as its kind exports it
    (graph-level GNNs: their pooling sized symbolically)."""
    from litlab.compat.pyg import drop_cached_graph

    net = model.net.eval()
    for m in net.modules():
        if getattr(m, "cached", False):
            drop_cached_graph(m)
    return kind.export_net(net)


def metadata(run, spec, ckpt_path, metric: str) -> dict:
    import torch  # imported when the run starts (the config is checked before)

    import litlab

    return {
        "kind": spec.kind,
        tasks.of(spec).names_key: spec.outputs,
        "input_names": spec.input_names,
        "inputs": spec.layout,
        "metric": f"test/{metric}",
        "config": OmegaConf.to_container(run.config, resolve=True),
        "checkpoint": str(ckpt_path),
        "checkpoint_sha256": sha256(ckpt_path),
        "litlab_version": getattr(litlab, "__version__", "unknown"),
        "torch_version": torch.__version__,
    }


def serving_metadata(spec, predict, meta: dict) -> None:
    """What the service needs beyond the layout: the training background of images (for
    transparent uploads, where the kind serves image files) and the out-of-distribution
    score's model and threshold (where the kind's outputs carry a confidence)."""
    from litlab.export import ood

    kind = tasks.of(spec)
    if kind.background:
        meta["inputs"]["background"] = ood.background(spec)
    if not kind.confidence:
        return
    meta["ood"] = ood.measure(spec, predict, kind.ood_inputs(spec))
    threshold = meta["ood"].get("threshold")
    if not (isinstance(threshold, int | float) and math.isfinite(threshold)):
        # finite weights can still overflow (1e38): no file ships a `nan` threshold
        raise UserError(
            f"ckpt_path={meta['checkpoint']}: the model's outputs on the test split are not "
            f"finite (out-of-distribution threshold {threshold}); its weights overflow: "
            "pick another checkpoint of the run"
        )


def write_format(fmt, net, spec, path, meta, calibration_batches: int) -> None:
    from litlab.export import onnx, quantize

    if fmt in ("onnx", "pt2"):
        write = onnx.export_onnx if fmt == "onnx" else onnx.export_pt2
        write(
            net,
            spec.example,
            path,
            input_names=spec.input_names,
            dynamic=spec.dynamic,
            metadata=meta,
        )
    elif fmt == "onnx_int8":
        quantize.quantize_int8(
            path.with_name(FILES["onnx"]),
            spec.calibration(calibration_batches),
            path,
            op_types=tasks.of(spec).int8_op_types,
        )
    elif fmt == "tensorrt":
        onnx.export_tensorrt(net, spec.example, path, meta)


def export(cfg: DictConfig) -> dict:
    """`python src/export.py`: the config checked (one line, exit 2, before torch is imported
    where the check needs none), then `run_export`."""
    from litlab.config import validate

    settings = validate.check(cfg, "export")
    return run_export(settings, cfg.paths.output_dir, data_dir=cfg.paths.data_dir)


def export_checkpoint(ckpt_path, output_dir, data_dir=None, **settings) -> dict:
    """Export from Python (serve, tests, benchmarks): `settings` are export.yaml's keys
    (`formats=["onnx"]`, `latency={"batch_sizes": []}`), checked as the command checks them;
    `data_dir`: where the checkpoint's data is on this machine (as `paths.data_dir`)."""
    from litlab.config import validate

    values = {"task_name": "export", "ckpt_path": str(ckpt_path), **settings}
    cfg = OmegaConf.create({**values, "paths": {"output_dir": str(output_dir)}})
    return run_export(validate.check(cfg, "export"), output_dir, data_dir=data_dir)


def run_export(settings: ExportSettings, output_dir, data_dir=None) -> dict:
    """Export, verify and time; returns the report (also written as export_report.md/.json).
    `report["ok"]` is False when a format failed to export or to verify. `data_dir`: where
    the checkpoint's data is on this machine (`load_run`)."""
    import logging

    import torch

    from litlab.export.verify import Judge, eager_predictor
    from litlab.runs.rebuild import load_run

    for name in ("onnx_ir", "onnxscript", "onnxruntime"):  # their INFO lines: noise
        logging.getLogger(name).setLevel(logging.WARNING)
    run = load_run(
        settings.ckpt_path,
        dict(settings.data_overrides),
        trust=settings.trust_checkpoint,
        data_dir=data_dir,
    )
    kind = tasks.of(run.datamodule)
    spec = kind.export_spec(run)
    net = prepare_net(run.model, kind)
    eager = eager_predictor(net)
    judge = Judge(run.model, spec, eager, settings)
    meta = metadata(run, spec, settings.ckpt_path, judge.metric)
    serving_metadata(spec, eager, meta)
    ood = meta.get("ood", {})
    if ood:
        print(
            f"out-of-distribution threshold {ood['threshold']:.3g}: "
            f"{ood['test_exceed_fraction']:.1%} of the test split above it"
        )
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(f"checkpoint (eager torch): test/{judge.metric} {judge.reference:.4f}")
    rows = {
        fmt: _export_format(fmt, net, spec, out / FILES[fmt], meta, settings, judge)
        for fmt in settings.format_list()
    }
    latency, batch_unit = _latency(net, spec, out, rows, settings)
    result = {
        "ok": all(r["ok"] or r.get("written") is False for r in rows.values()),
        "checkpoint": str(settings.ckpt_path),
        "kind": spec.kind,
        "metric": f"test/{judge.metric}",
        "checkpoint_metric": judge.reference,
        "formats": rows,
        "latency": latency,
        "threads": torch.get_num_threads(),
        "batch_unit": batch_unit,
        "metadata": {k: v for k, v in meta.items() if k not in ("config", "ood")},
        "ood": {k: v for k, v in ood.items() if k not in ("model", "parts")},
    }
    write_export_report(result, out)
    print(f"run dir {out}  (report: export_report.md)")
    return result


def _export_format(fmt: str, net, spec, path: Path, meta, settings, judge) -> dict:
    """Write one format, verify it and judge it; any failure is this format's row, said."""
    row = {"file": path.name, "ok": False}
    try:
        write_format(fmt, net, spec, path, meta, settings.calibration_batches)
    except Exception as err:  # noqa: BLE001 (any exporter failure is reported per format)
        row["error"] = unsupported(fmt, err)
        print(row["error"])
        return row
    row["size_bytes"] = path.stat().st_size
    try:
        judge.verify(fmt, path, row)
    except Exception as err:  # noqa: BLE001
        row["error"] = f"{fmt}: verification could not run: {one_line(err, limit=200)}"
        print(row["error"])
        return row
    judge.judge(fmt, path, row)
    if row.get("written") is False:
        print(row["skipped"])
        return row
    print(
        f"{fmt:10s} {'ok    ' if row['ok'] else 'FAILED'} max abs diff "
        f"{row['max_abs_diff']:.2e}, rel {row['max_rel_diff']:.2e}; test/{judge.metric} "
        f"{row['metric']:.4f} (checkpoint {judge.reference:.4f}); {row['size_bytes']:,} bytes"
    )
    return row


def _latency(net, spec, out: Path, rows: dict, settings) -> tuple[dict, str]:
    """Latency of the eager net and of each verified ONNX file, and the unit of a batch."""
    from litlab.export.verify import measure_latency

    onnx_files = {f: out / FILES[f] for f in ("onnx", "onnx_int8") if rows.get(f, {}).get("ok")}
    if spec.dynamic[spec.input_names[0]].get(0) == "batch":
        one = spec.example[0][:1]
        sizes = tuple(settings.latency.batch_sizes)
        make = lambda b: (one.expand(b, *one.shape[1:]).contiguous(),)  # noqa: E731
        unit = "samples"
    else:  # graphs: one row per whole input (a graph, or a batch of graphs)
        sizes, make = (1,), lambda b: spec.example
        unit = "whole input (graph or graph batch)"
    latency = measure_latency(net, onnx_files, make, sizes, budget_s=settings.latency.budget_s)
    return latency, unit


# ---------------------------------------------------------------- report
def report_markdown(r: dict) -> str:
    lines = [
        f"# Export report: {Path(r['checkpoint']).name}",
        "",
        (
            f"kind `{r['kind']}`; checkpoint `{r['checkpoint']}` "
            f"(sha256 `{r['metadata']['checkpoint_sha256'][:16]}...`); "
            f"litlab {r['metadata']['litlab_version']}, torch {r['metadata']['torch_version']}"
        ),
        "",
        f"## Formats (checkpoint {r['metric']}: {r['checkpoint_metric']:.4f})",
        "",
        (
            f"| format | file | size (bytes) | {r['metric']} | max abs diff | max rel diff "
            "| check | status |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for fmt, row in r["formats"].items():
        if "metric" not in row:
            lines.append(f"| {fmt} | {row['file']} | | | | | | FAILED: {row.get('error')} |")
            continue
        status = "ok" if row["ok"] else "FAILED"
        if row.get("written") is False:
            status = f"not written ({row['drop']:.4f} worse)"
        lines.append(
            f"| {fmt} | {'(none)' if row.get('written') is False else row['file']} | {row['size_bytes']:,} | {row['metric']:.4f} | "
            f"{row['max_abs_diff']:.2e} | {row['max_rel_diff']:.2e} | {row['check']} | "
            f"{status} |"
        )
    lines += [
        "",
        f"## Latency (ms, {r['threads']} thread(s); batch = {r['batch_unit']})",
        "",
        "| runtime | batch | p50 | p99 | runs |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {x['format']} | {x['batch']} | {x['p50_ms']:.3f} | {x['p99_ms']:.3f} | {x['runs']} |"
        for x in r["latency"]
    ]
    lines += ["", "Timings on a shared machine are noisy; compare rows of one report only.", ""]
    return "\n".join(lines)


def write_export_report(result: dict, out: Path) -> None:
    (out / "export_report.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "export_report.md").write_text(report_markdown(result))
