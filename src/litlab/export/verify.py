"""Check an artifact against the checkpoint: the same outputs on held-out inputs, and the
test-split metric recomputed through the artifact (ONNX Runtime, torch.export.load); whether it
may ship (`src/export.py`): fp32 files match the checkpoint, an int8 file keeps the test metric
within the task kind's share.

Latency of eager torch against ONNX Runtime sessions, p50/p99 per batch size: the same thread
count for both (torch's intra-op threads = ORT's), inputs prepared beforehand, a warm-up first,
so the rows compare the runtimes and not the setup."""

import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from litlab.config.after_training import ExportSettings
from litlab.tasks.kind import Spec
from litlab.threads import ort_session


def predictor(fmt: str, path: Path, input_names: list[str]) -> Callable[..., torch.Tensor]:
    """inputs (tensors) -> logits tensor, through the artifact's own runtime."""
    if fmt in ("onnx", "onnx_int8"):
        session = ort_session(path)
        names = [i.name for i in session.get_inputs()]

        def run_onnx(*inputs):
            feeds = dict(zip(names, (t.detach().cpu().numpy() for t in inputs)))
            return torch.from_numpy(session.run(None, feeds)[0])

        return run_onnx
    if fmt == "pt2":
        from litlab.export.onnx import load_pt2

        module = load_pt2(path)[0]
        return lambda *inputs: module(*inputs).detach()
    if fmt == "tensorrt":
        import torch_tensorrt

        module = torch_tensorrt.load(str(path)).module()
        return lambda *inputs: module(*(t.cuda() for t in inputs)).float().cpu()
    raise ValueError(f"no runtime for format {fmt}")


def eager_predictor(net: torch.nn.Module) -> Callable[..., torch.Tensor]:
    def run(*inputs):
        with torch.inference_mode():
            return net(*inputs)

    return run


def max_diffs(reference: Callable, candidate: Callable, inputs: list[tuple]) -> dict:
    """Largest absolute difference of outputs, and the same relative to the largest output
    magnitude (elementwise ratios blow up near zero logits)."""
    abs_diff, scale = 0.0, 0.0
    for args in inputs:
        ref, got = reference(*args).float(), candidate(*args).float()
        if ref.shape != got.shape:
            raise AssertionError(f"output shape {tuple(got.shape)} != eager {tuple(ref.shape)}")
        abs_diff = max(abs_diff, float((ref - got).abs().max()))
        scale = max(scale, float(ref.abs().max()))
    return {"max_abs_diff": abs_diff, "max_rel_diff": abs_diff / max(scale, 1e-12)}


def test_metric(model, spec: Spec, predict: Callable, metric_name: str) -> float:
    """The module's own test metric (e.g. acc, dice), computed from `predict`'s outputs."""
    metrics = model.make_metrics()
    for inputs, target in spec.test_batches():
        with torch.inference_mode():
            metrics.update(spec.score(predict, inputs), target)
    value = metrics.compute()[metric_name]
    return float(np.asarray(value.cpu() if hasattr(value, "cpu") else value))


# ----------------------------------------------------------------- judge
#: formats judged by their outputs against the checkpoint's (not by the metric's loss)
FP32 = ("onnx", "pt2")


class Judge:
    """Whether an exported file may ship: fp32 files match the checkpoint's outputs within
    `rtol`; an int8 file loses at most its share of the test metric (`int8_max_drop`, by
    default the task kind's, as compress=quantize judges it)."""

    def __init__(self, model, spec, eager, settings: ExportSettings) -> None:
        from litlab import tasks

        self.model, self.spec, self.eager, self.rtol = model, spec, eager, settings.rtol
        self.metric = model.hparams.monitor.split("/", 1)[1]
        self.higher_better = model.hparams.monitor_mode == "max"
        self.reference = test_metric(model, spec, eager, self.metric)
        drop = settings.int8_max_drop
        self.int8_max_drop = tasks.of(spec).quantize_max_drop if drop is None else drop

    def verify(self, fmt: str, path: Path, row: dict) -> None:
        """The file's outputs and test metric against the checkpoint's, into `row`."""
        predict = predictor(fmt, path, self.spec.input_names)
        row |= max_diffs(self.eager, predict, self.spec.held_out)
        row["metric"] = test_metric(self.model, self.spec, predict, self.metric)

    def judge(self, fmt: str, path: Path, row: dict) -> None:
        """`row["ok"]` and its check; an int8 file that lost too much is deleted, and said so."""
        if fmt in FP32:
            row["ok"] = row["max_rel_diff"] <= self.rtol
            row["check"] = f"max rel diff <= {self.rtol:g}"
            return
        metric, reference, allowed = self.metric, self.reference, self.int8_max_drop
        drop = reference - row["metric"] if self.higher_better else row["metric"] - reference
        share = drop / abs(reference) if reference else (0.0 if drop <= 0 else float("inf"))
        row["ok"] = share <= allowed
        row["check"] = (
            f"test/{metric} at most {allowed:.0%} worse than the checkpoint's "
            f"(int8_max_drop={allowed:g})"
        )
        if not row["ok"]:  # an int8 file that lost accuracy is not an artifact to ship
            path.unlink()
            row |= {"written": False, "drop": drop}
            row["skipped"] = (
                f"{fmt}: not written: test/{metric} {row['metric']:.4f} is {share:.2%} worse "
                f"than the checkpoint's {reference:.4f} (int8_max_drop={allowed:g}, a share); "
                "the fp32 formats are the ones to use"
            )


# --------------------------------------------------------------- latency
def _percentiles(fn: Callable[[], object], iters: int, warmup: int, budget_s: float):
    for _ in range(warmup):
        fn()
    times, stop = [], time.perf_counter() + budget_s
    while len(times) < iters and (len(times) < 5 or time.perf_counter() < stop):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99)), len(times)


def measure_latency(
    net: nn.Module | None,
    onnx_files: Mapping[str, object],
    make_inputs: Callable[[int], tuple] | torch.Tensor,
    batch_sizes: tuple[int, ...] = (1, 64),
    iters: int = 200,
    warmup: int = 10,
    budget_s: float = 5.0,
    threads: int | None = None,
) -> list[dict]:
    """Rows {format, batch, p50_ms, p99_ms, runs}: "eager" for `net` (a LitModule's net is
    used), then one per {name: onnx_path}. `make_inputs(batch)` returns the input tensors in
    the model's input order; a tensor instead is one sample (no batch axis), repeated.
    Each cell stops after `iters` runs or `budget_s` seconds (at least 5 runs)."""
    if isinstance(make_inputs, torch.Tensor):
        sample = make_inputs[None]

        def make_inputs(batch):
            return (sample.expand(batch, *sample.shape[1:]).contiguous(),)

    rows = []
    sessions = {name: ort_session(Path(path), threads) for name, path in onnx_files.items()}
    if net is not None:
        net = getattr(net, "net", net).eval()
    for batch in batch_sizes:
        inputs = tuple(make_inputs(batch))
        runs = {"eager": lambda x=inputs: net(*x)} if net is not None else {}
        for name, session in sessions.items():
            feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
            runs[name] = lambda s=session, f=feeds: s.run(None, f)
        for name, run in runs.items():
            with torch.inference_mode():
                p50, p99, n = _percentiles(run, iters, warmup, budget_s)
            rows.append({"format": name, "batch": batch, "p50_ms": p50, "p99_ms": p99, "runs": n})
    return rows
