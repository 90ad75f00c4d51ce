"""litlab's worked example of a custom operator: `litlab::tiled_matmul`, a tiled matrix multiply
with a C++ CPU kernel, a CUDA kernel and a Triton kernel behind one `torch.library` op that
autograd, torch.compile, torch.export and the ONNX exporter all understand. docs/ops.md walks
through it as the model for your own op.

    from litlab.ops import matmul, TiledLinear
    y = matmul(x, w)                     # torch.matmul semantics, the op's kernels
    torch.ops.litlab.tiled_matmul(a, b)  # the op itself, same semantics

Importing this package defines the op (`litlab.ops.op` has its ONNX translation); nothing is compiled until a
kernel runs (see `build.py`).
"""

from litlab.ops.api import TiledLinear, make_linear, matmul, tile_linears, with_linear_impl
from litlab.ops.op import SUPPORTED, tiled_matmul

__all__ = [
    "SUPPORTED",
    "TiledLinear",
    "make_linear",
    "matmul",
    "tile_linears",
    "tiled_matmul",
    "with_linear_impl",
]
