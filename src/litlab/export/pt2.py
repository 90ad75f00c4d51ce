"""`torch.export` programs (`.pt2`) with the same dynamic axes and metadata as the ONNX file.

The metadata is one JSON extra file (`metadata.json`) inside the archive; read it back with
`read_pt2_metadata` (no need to deserialize the program)."""

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
