"""Latency of eager torch against ONNX Runtime sessions: p50/p99 per batch size.

Same thread count for both (torch's intra-op threads = ORT's), inputs prepared beforehand, a
warm-up first, so the rows compare the runtimes and not the setup.
"""

import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn


def ort_session(path, threads: int | None = None):
    """A CPU ONNX Runtime session with all graph optimizations and `threads` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or torch.get_num_threads()
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


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
        if net is not None:
            with torch.inference_mode():
                p50, p99, n = _percentiles(lambda x=inputs: net(*x), iters, warmup, budget_s)
            rows.append(
                {"format": "eager", "batch": batch, "p50_ms": p50, "p99_ms": p99, "runs": n}
            )
        for name, session in sessions.items():
            feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
            p50, p99, n = _percentiles(
                lambda s=session, f=feeds: s.run(None, f), iters, warmup, budget_s
            )
            rows.append({"format": name, "batch": batch, "p50_ms": p50, "p99_ms": p99, "runs": n})
    return rows
