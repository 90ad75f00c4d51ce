"""TensorRT through Torch-TensorRT: needs a CUDA GPU and `torch_tensorrt`
(requirements-gpu.txt). `config.rules.tensorrt_missing()` says in one line what this machine
lacks (export.py refuses `formats=[tensorrt]` with it before anything is built)."""

from pathlib import Path

import torch


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
