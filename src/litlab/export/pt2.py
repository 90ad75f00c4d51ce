"""`torch.export` programs (`.pt2`) with the same dynamic axes and metadata as the ONNX file.

The metadata is one JSON extra file (`metadata.json`) inside the archive; read it back with
`read_pt2_metadata` (no need to deserialize the program).

TensorRT through Torch-TensorRT: needs a CUDA GPU and `torch_tensorrt`
(requirements-gpu.txt). `config.rules.tensorrt_missing()` says in one line what this machine
lacks (export.py refuses `formats=[tensorrt]` with it before anything is built)."""

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

from litlab.export.onnx import _dim_specs, _net
from litlab.ops import op as _ops  # noqa: F401  (programs of nets with litlab's ops load)

METADATA_FILE = "metadata.json"


def export_pt2(
    model: nn.Module,
    example_inputs: tuple,
    path,
    *,
    input_names=("x",),
    dynamic: Mapping | None = None,
    metadata: Mapping | None = None,
) -> Path:
    """Write `model` (a LitModule's net, or any nn.Module) as a torch.export program."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dynamic = dict(dynamic) if dynamic is not None else {n: {0: "batch"} for n in input_names}
    with torch.no_grad():
        program = torch.export.export(
            _net(model).eval(),
            tuple(example_inputs),
            dynamic_shapes=_dim_specs(dynamic, list(input_names)),
        )
    # torch.export keeps the example inputs in the archive: for a full graph (Cora: 2,708 x
    # 1,433 features) that is data, 150x the program; a program needs none of it to run
    program.example_inputs = None
    text = json.dumps(dict(metadata or {}), default=str)
    torch.export.save(program, str(path), extra_files={METADATA_FILE: text})
    return path


def load_pt2(path) -> tuple[Callable, dict]:
    """(callable module, metadata) of a `.pt2` file (pickle inside: trusted files only)."""
    extra = {METADATA_FILE: ""}
    program = torch.export.load(str(path), extra_files=extra)
    return program.module(), json.loads(extra[METADATA_FILE] or "{}")


def read_pt2_metadata(path) -> dict:
    return load_pt2(path)[1]


# -------------------------------------------------------------- tensorrt
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
