"""`python src/export.py ckpt_path=PATH`: rebuild the run, write each format, verify each one
against the checkpoint (outputs and test metric), time them, and write the report."""

import hashlib
import math
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.errors import UserError, one_line
from litlab.export.settings import ExportSettings

FILES = {
    "onnx": "model.onnx",
    "pt2": "model.pt2",
    "onnx_int8": "model.int8.onnx",
    "tensorrt": "model.trt.ep",
}
FP32 = ("onnx", "pt2")
# what still works when a format's exporter fails on an op
FALLBACK = {"onnx": "pt2", "pt2": "onnx", "onnx_int8": "onnx"}


def _torch():
    """torch, imported when the run starts (the config is checked before)."""
    import torch

    return torch


def sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def litlab_version() -> str:
    import litlab

    return getattr(litlab, "__version__", "unknown")


def unsupported(fmt: str, err: Exception) -> str:
    """One line naming the op the exporter could not handle, and a format that works."""
    text = str(err)
    op = re.search(r"(aten::\w+|aten\.\w+(?:\.\w+)?|torch\.ops\.[\w.]+|Op ?type[:=]? ?'?\w+)", text)
    what = f"op {op.group(1)}" if op else one_line(err, limit=200)
    return f"{fmt}: the exporter cannot handle {what}; formats=[{FALLBACK.get(fmt, 'onnx')}] works"


def prepare_net(model):
    """The module's plain net in eval mode, without graph caches (a cached GCN adjacency would
    be baked into the file as a constant of the training graph); graph-level GNNs get their
    pooling sized symbolically (domains.SizedPooling)."""
    from litlab.compat.pyg import drop_cached_graph
    from litlab.export.domains import SizedPooling

    net = model.net.eval()
    for m in net.modules():
        if getattr(m, "cached", False):
            drop_cached_graph(m)
    return SizedPooling(net).eval() if getattr(net, "node_level", True) is False else net


def metadata(run, spec, ckpt_path, metric: str) -> dict:
    return {
        "task": spec.task,
        "classes": spec.classes,
        "input_names": spec.input_names,
        "inputs": spec.layout,
        "metric": f"test/{metric}",
        "config": OmegaConf.to_container(run.config, resolve=True),
        "checkpoint": str(ckpt_path),
        "checkpoint_sha256": sha256(ckpt_path),
        "litlab_version": litlab_version(),
        "torch_version": _torch().__version__,
    }


def serving_metadata(spec, predict, meta: dict) -> None:
    """What the service needs beyond the layout: the training background of images (for
    transparent uploads, where the kind serves image files) and the out-of-distribution
    score's model and threshold."""
    from litlab import tasks
    from litlab.export import ood

    if tasks.get(spec.task).serve_files == "image":
        meta["inputs"]["background"] = ood.background(spec)
    meta["ood"] = ood.measure(spec, predict)
    threshold = meta["ood"].get("threshold")
    if not (isinstance(threshold, int | float) and math.isfinite(threshold)):
        # finite weights can still overflow (1e38): no file ships a `nan` threshold
        raise UserError(
            f"ckpt_path={meta['checkpoint']}: the model's outputs on the test split are not "
            f"finite (out-of-distribution threshold {threshold}); its weights overflow: "
            "pick another checkpoint of the run"
        )


def write_format(fmt, net, spec, path, meta, calibration_batches: int) -> None:
    from litlab import tasks
    from litlab.export import onnx, pt2, quantize

    if fmt in ("onnx", "pt2"):
        write = onnx.export_onnx if fmt == "onnx" else pt2.export_pt2
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
            op_types=tasks.get(spec.task).int8_op_types,
        )
    elif fmt == "tensorrt":
        from litlab.export import tensorrt

        tensorrt.export_tensorrt(net, spec.example, path, meta)


def export(cfg: DictConfig) -> dict:
    """`python src/export.py`: the config checked (one line, exit 2, before torch is imported
    where the check needs none), then `run_export`."""
    from litlab.config.validate import entry_config

    settings = entry_config(cfg, ExportSettings)
    return run_export(settings, cfg.paths.output_dir, data_dir=cfg.paths.data_dir)


def export_checkpoint(ckpt_path, output_dir, data_dir=None, **settings) -> dict:
    """Export from Python (serve, tests, benchmarks): `settings` are export.yaml's keys
    (`formats=["onnx"]`, `latency={"batch_sizes": []}`), checked as the command checks them;
    `data_dir`: where the checkpoint's data is on this machine (as `paths.data_dir`)."""
    from litlab.config.settings import check

    values = {"task_name": "export", "ckpt_path": str(ckpt_path), **settings}
    checked = check(ExportSettings, values)
    checked.check_files()
    return run_export(checked, output_dir, data_dir=data_dir)


def run_export(settings: ExportSettings, output_dir, data_dir=None) -> dict:
    """Export, verify and time; returns the report (also written as export_report.md/.json).
    `report["ok"]` is False when a format failed to export or to verify. `data_dir`: where
    the checkpoint's data is on this machine (`load_run`)."""
    import logging

    from litlab import tasks
    from litlab.export import report as reporting
    from litlab.export.domains import spec_for
    from litlab.export.latency import measure_latency
    from litlab.export.verify import eager_predictor, max_diffs, predictor, test_metric
    from litlab.recipes.load import load_run

    for name in ("onnx_ir", "onnxscript", "onnxruntime"):  # their INFO lines: noise
        logging.getLogger(name).setLevel(logging.WARNING)
    formats, ckpt_path = settings.format_list(), settings.ckpt_path
    rtol = settings.rtol
    overrides, trust = dict(settings.data_overrides), settings.trust_checkpoint
    run = load_run(ckpt_path, overrides, trust=trust, data_dir=data_dir)
    spec = spec_for(run)
    net = prepare_net(run.model)
    metric = run.model.hparams.monitor.split("/", 1)[1]
    higher_better = run.model.hparams.monitor_mode == "max"
    meta = metadata(run, spec, ckpt_path, metric)
    eager = eager_predictor(net)
    serving_metadata(spec, eager, meta)
    print(
        f"out-of-distribution threshold {meta['ood']['threshold']:.3g}: "
        f"{meta['ood']['test_exceed_fraction']:.1%} of the test split above it"
    )
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    reference = test_metric(run.model, spec, eager, metric)
    int8_max_drop = settings.int8_max_drop
    if int8_max_drop is None:  # the task kind's share: compress=quantize judges by the same
        int8_max_drop = tasks.get(spec.task).quantize_max_drop
    print(f"checkpoint (eager torch): test/{metric} {reference:.4f}")
    rows = {}
    for fmt in formats:
        path = out / FILES[fmt]
        row = rows[fmt] = {"file": path.name, "ok": False}
        try:
            write_format(fmt, net, spec, path, meta, settings.calibration_batches)
        except Exception as err:  # noqa: BLE001 (any exporter failure is reported per format)
            row["error"] = unsupported(fmt, err)
            print(row["error"])
            continue
        row["size_bytes"] = path.stat().st_size
        try:
            predict = predictor(fmt, path, spec.input_names)
            row |= max_diffs(eager, predict, spec.held_out)
            row["metric"] = test_metric(run.model, spec, predict, metric)
        except Exception as err:  # noqa: BLE001
            row["error"] = f"{fmt}: verification could not run: {one_line(err, limit=200)}"
            print(row["error"])
            continue
        if fmt in FP32:
            row["ok"] = row["max_rel_diff"] <= rtol
            row["check"] = f"max rel diff <= {rtol:g}"
        else:
            drop = reference - row["metric"] if higher_better else row["metric"] - reference
            share = drop / abs(reference) if reference else (0.0 if drop <= 0 else float("inf"))
            row["ok"] = share <= int8_max_drop
            row["check"] = (
                f"test/{metric} at most {int8_max_drop:.0%} worse than the checkpoint's "
                f"(int8_max_drop={int8_max_drop:g})"
            )
            if not row["ok"]:  # an int8 file that lost accuracy is not an artifact to ship
                path.unlink()
                row |= {"written": False, "drop": drop}
                row["skipped"] = (
                    f"{fmt}: not written: test/{metric} {row['metric']:.4f} is {share:.2%} worse "
                    f"than the checkpoint's {reference:.4f} (int8_max_drop={int8_max_drop:g}, a "
                    f"share); the fp32 formats are the ones to use"
                )
                print(row["skipped"])
                continue
        print(
            f"{fmt:10s} {'ok    ' if row['ok'] else 'FAILED'} max abs diff "
            f"{row['max_abs_diff']:.2e}, rel {row['max_rel_diff']:.2e}; test/{metric} "
            f"{row['metric']:.4f} (checkpoint {reference:.4f}); {row['size_bytes']:,} bytes"
        )
    onnx_files = {f: out / FILES[f] for f in ("onnx", "onnx_int8") if rows.get(f, {}).get("ok")}
    batched = spec.dynamic[spec.input_names[0]].get(0) == "batch"
    if batched:
        one = spec.example[0][:1]
        sizes, make = (
            tuple(settings.latency.batch_sizes),
            lambda b: (one.expand(b, *one.shape[1:]).contiguous(),),
        )
    else:  # graphs: one row per whole input (a graph, or a batch of graphs)
        sizes, make = (1,), lambda b: spec.example
    latency = measure_latency(net, onnx_files, make, sizes, budget_s=settings.latency.budget_s)
    result = {
        "ok": all(r["ok"] or r.get("written") is False for r in rows.values()),
        "checkpoint": str(ckpt_path),
        "task": spec.task,
        "metric": f"test/{metric}",
        "checkpoint_metric": reference,
        "formats": rows,
        "latency": latency,
        "threads": _torch().get_num_threads(),
        "batch_unit": "samples" if batched else "whole input (graph or graph batch)",
        "metadata": {k: v for k, v in meta.items() if k not in ("config", "ood")},
        "ood": {k: v for k, v in meta["ood"].items() if k not in ("model", "parts")},
    }
    reporting.write(result, out)
    print(f"run dir {out}  (report: export_report.md)")
    return result
