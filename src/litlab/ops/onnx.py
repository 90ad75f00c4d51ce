"""How ONNX export sees the op: as the standard `MatMul` node (same semantics for 2-D and
batched 3-D inputs), so an exported model runs in any ONNX runtime without this extension.

- the dynamo exporter (`torch.onnx.export(dynamo=True)`, litlab's default) takes a
  `custom_translation_table`: `litlab.export.onnx` passes `translations()`;
- the legacy TorchScript exporter (litlab's fallback) uses the symbolic that `translations()`
  registers as well (not at import: torch.onnx is a heavy import a training run never needs).
"""

import torch

from litlab.ops.op import tiled_matmul as _op


def _matmul_symbolic(g, a, b):
    return g.op("MatMul", a, b)


def translations() -> dict:
    """{op overload: onnxscript function} for torch.onnx.export(custom_translation_table=...);
    registers the legacy exporter's symbolic too."""
    from onnxscript import opset18 as op

    torch.onnx.register_custom_op_symbolic("litlab::tiled_matmul", _matmul_symbolic, 9)

    def tiled_matmul(a, b):
        return op.MatMul(a, b)

    from litlab.compat.torch import op_overload

    return {op_overload(_op): tiled_matmul}
