"""Check an artifact against the checkpoint: the same outputs on held-out inputs, and the
test-split metric recomputed through the artifact (ONNX Runtime, torch.export.load)."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from litlab.tasks.kind import Spec


def predictor(fmt: str, path: Path, input_names: list[str]) -> Callable[..., torch.Tensor]:
    """inputs (tensors) -> logits tensor, through the artifact's own runtime."""
    if fmt in ("onnx", "onnx_int8"):
        from litlab.export.latency import ort_session

        session = ort_session(path)
        names = [i.name for i in session.get_inputs()]

        def run_onnx(*inputs):
            feeds = dict(zip(names, (t.detach().cpu().numpy() for t in inputs)))
            return torch.from_numpy(session.run(None, feeds)[0])

        return run_onnx
    if fmt == "pt2":
        from litlab.export.pt2 import load_pt2

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
