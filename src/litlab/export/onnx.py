"""One-file ONNX export with dynamic axes and metadata that travels inside the file.

`torch.onnx.export(dynamo=True)` (torch.export based, the maintained exporter) is tried first;
the legacy exporter is the fallback for nets torch.export cannot trace. Weights are embedded
(no `.onnx.data` beside the file) whenever the model fits ONNX's 2 GB protobuf limit.
`torch.export` programs (`.pt2`) get the same dynamic axes, and the metadata as one JSON extra
file (`metadata.json`), read back with the program (`read_pt2_metadata`: `torch.export.load`).

TensorRT through Torch-TensorRT needs a CUDA GPU and `torch_tensorrt` (requirements-gpu.txt):
`config.rules.tensorrt_missing()` says in one line what this machine lacks (export.py refuses
`formats=[tensorrt]` with it before anything is built)."""

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from litlab.errors import one_line
from litlab.ops import op as ops_onnx  # imported: programs of nets with litlab's ops load

PROTOBUF_LIMIT = 2 * 1024**3 - 1024  # bytes a single-file ONNX can hold (protobuf limit)


def _net(model: nn.Module) -> nn.Module:
    """A LitModule's plain net (no trainer, metrics or compile wrapper), or the model itself."""
    return getattr(model, "net", model)


def _dim_specs(dynamic: Mapping[str, Mapping[int, str]], names: Sequence[str]):
    """{input: {axis: name or Dim}} -> torch.export dynamic_shapes (one Dim per name, shared;
    a Dim, e.g. `8 * Dim("d")` for multiples of 8, is used as given)."""
    dims: dict[str, torch.export.Dim] = {}

    def dim(d):
        return dims.setdefault(d, torch.export.Dim(d, min=1)) if isinstance(d, str) else d

    return tuple(
        {axis: dim(d) for axis, d in dynamic.get(name, {}).items()} or None for name in names
    )


def export_onnx(
    model: nn.Module,
    example_inputs: tuple,
    path,
    *,
    input_names: Sequence[str] = ("x",),
    output_names: Sequence[str] = ("logits",),
    dynamic: Mapping[str, Mapping[int, str]] | None = None,
    metadata: Mapping[str, object] | None = None,
    exporter: str = "auto",
    opset: int = 18,
) -> Path:
    """Write `model` (a LitModule: its `net` is exported; or any nn.Module) to one ONNX file.

    `dynamic` names the dynamic axes per input, e.g. `{"x": {0: "batch"}}` (the default: axis 0
    of every input is the batch); the same name on two inputs means the same size; a
    `torch.export.Dim` expression instead of a name constrains the size (e.g. multiples of 8).
    `metadata` values are stored as ONNX `metadata_props` (non-strings as JSON).
    `exporter`: "dynamo", "legacy" or "auto" (dynamo, then legacy if dynamo fails).
    Example inputs should have a batch of at least 2 (a size-1 axis gets specialized)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    net, args = _net(model).eval(), tuple(example_inputs)
    names, outputs = list(input_names), list(output_names)
    dynamic = dict(dynamic) if dynamic is not None else {n: {0: "batch"} for n in input_names}
    errors = []
    for kind in ["dynamo", "legacy"] if exporter == "auto" else [exporter]:
        try:
            _export(kind, net, args, path, names, outputs, dynamic, opset)
            break
        except Exception as e:  # noqa: BLE001 (the exporters raise many types)
            errors.append(f"{kind}: {one_line(e, with_type=True, limit=300)}")
    else:
        raise RuntimeError("ONNX export failed; " + " | ".join(errors))
    write_metadata(path, {**(metadata or {}), "exporter": kind})
    return path


def _export(kind, net, args, path, input_names, output_names, dynamic, opset) -> None:
    with torch.no_grad():
        if kind == "dynamo":
            program = torch.onnx.export(
                net,
                args,
                dynamo=True,
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes=_dim_specs(dynamic, input_names),
                opset_version=opset,
                optimize=True,
                verbose=False,
                # litlab's own ops as standard ONNX nodes (litlab::tiled_matmul -> MatMul)
                custom_translation_table=ops_onnx.translations(),
            )
            program.save(str(path), external_data=False)
        else:
            ops_onnx.translations()  # registers the legacy exporter's symbolics too
            # names of the dynamic axes (a Dim becomes its name)
            axes = {k: {a: str(d) for a, d in v.items()} for k, v in dynamic.items()}
            if any(a.get(0) == "batch" for a in axes.values()):
                axes |= {o: {0: "batch"} for o in output_names}
            torch.onnx.export(
                net,
                args,
                str(path),
                dynamo=False,
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=axes,
                opset_version=opset,
                do_constant_folding=True,
            )


def _finite(value):
    """`value` with each NaN or infinite float written as text ('nan', 'inf'): JSON has no
    such numbers, and the service refuses a file whose metadata holds one (a run config may)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _as_text(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(_finite(value), default=str, allow_nan=False)


def write_metadata(path, metadata: Mapping[str, object]) -> None:
    """Add (or replace) `metadata_props` of the ONNX file at `path`, keeping it one file;
    node-level debug metadata is dropped."""
    import onnx

    path = Path(path)
    model = onnx.load(str(path))
    props = {p.key: p.value for p in model.metadata_props}
    props.update({str(k): _as_text(v) for k, v in metadata.items()})
    onnx.helper.set_model_props(model, props)
    # the exporter's per-node debug info (stack traces with this machine's paths, FX names):
    # 14 kB of a 400 kB CNN, and nothing a runtime reads
    for node in [*model.graph.node, *(n for f in model.functions for n in f.node)]:
        del node.metadata_props[:]
    external = model.ByteSize() > PROTOBUF_LIMIT  # only then a `.onnx.data` beside it
    onnx.save(model, str(path), save_as_external_data=external)


def read_metadata(path) -> dict[str, object]:
    """The file's `metadata_props`, JSON values decoded (a plain string stays a string)."""
    import onnx

    out = {}
    for prop in onnx.load(str(path), load_external_data=False).metadata_props:
        try:
            out[prop.key] = json.loads(prop.value)
        except (ValueError, RecursionError):  # a crafted deep nesting: kept as text
            out[prop.key] = prop.value
    return out


# ------------------------------------------------------------------- pt2
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
def compile_fp16(net: torch.nn.Module, example_inputs: tuple):
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
    import torch_tensorrt

    path = Path(path)
    trt = compile_fp16(net, example_inputs)
    torch_tensorrt.save(trt, str(path), inputs=[t.cuda() for t in example_inputs])
    path.with_suffix(".json").write_text(json.dumps(metadata or {}, default=str))
    return path
