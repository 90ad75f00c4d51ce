"""TensorRT through Torch-TensorRT: needs a CUDA GPU and `torch_tensorrt`
(requirements-gpu.txt). `missing()` says in one line what this machine lacks."""

from pathlib import Path

import torch


def missing() -> str | None:
    """None when TensorRT can run here, else one sentence saying what is missing."""
    import importlib.util

    lacks = []
    if not torch.cuda.is_available():
        lacks.append("a CUDA GPU (torch.cuda.is_available() is False)")
    if importlib.util.find_spec("torch_tensorrt") is None:
        lacks.append("the torch_tensorrt package (pip install -r requirements-gpu.txt)")
    if not lacks:
        return None
    return (
        "tensorrt cannot run here: this machine lacks "
        + " and ".join(lacks)
        + "; formats onnx, pt2 and onnx_int8 work here"
    )


def compile_fp16(net: torch.nn.Module, example_inputs: tuple, dynamic=None):
    """A Torch-TensorRT fp16 module of `net` (weights and inputs moved to the GPU)."""
    import copy

    import torch_tensorrt

    net = copy.deepcopy(net).eval().cuda()  # the CPU net stays the eager reference
    inputs = [t.cuda() for t in example_inputs]
    return torch_tensorrt.compile(
        net, ir="dynamo", inputs=inputs, enabled_precisions={torch.float16, torch.float32}
    )


def export_tensorrt(net, example_inputs: tuple, path, metadata: dict | None = None) -> Path:
    """Save a TensorRT-compiled program as `.ep` (torch_tensorrt.save), metadata beside it."""
    import json

    import torch_tensorrt

    path = Path(path)
    trt = compile_fp16(net, example_inputs)
    torch_tensorrt.save(trt, str(path), inputs=[t.cuda() for t in example_inputs])
    path.with_suffix(".json").write_text(json.dumps(metadata or {}, default=str))
    return path
