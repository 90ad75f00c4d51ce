"""litlab's worked example of a custom operator: `litlab::tiled_matmul`, a tiled matrix multiply
with a C++ CPU kernel, a CUDA kernel and a Triton kernel behind one `torch.library` op that
autograd, torch.compile, torch.export and the ONNX exporter all understand. docs/ops.md walks
through it as the model for your own op.

    from litlab.ops import matmul, TiledLinear
    y = matmul(x, w)                     # torch.matmul semantics, the op's kernels
    torch.ops.litlab.tiled_matmul(a, b)  # the op itself, same semantics

Importing this package defines the op (`litlab.ops.op` has its ONNX translation); nothing is compiled until a
kernel runs (see `build.py`).

What a model uses: `matmul` (torch.matmul's broadcasting over the op) and `TiledLinear`."""

from typing import Literal

from torch import Tensor, nn

from litlab.errors import UserError
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


# ------------------------------------------------------------------- api
LINEAR_IMPLS = ("torch", "tiled")


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul computed by `litlab::tiled_matmul` (the op has torch.matmul's semantics:
    1-D operands, broadcast batch axes)."""
    return tiled_matmul(a, b)


class TiledLinear(nn.Linear):
    """nn.Linear whose product is `litlab::tiled_matmul`: same parameters and state_dict keys,
    so checkpoints move between `linear_impl=torch` and `tiled`, and tools that look for
    nn.Linear (pruning, embeddings) still find it. The weight is used transposed in place: the
    kernel packs any strides, no copy is made."""

    def forward(self, x: Tensor) -> Tensor:
        out = matmul(x, self.weight.t())
        return out + self.bias if self.bias is not None else out


def make_linear(impl: Literal["torch", "tiled"], in_features: int, out_features: int, bias=True):
    """The Linear class a net's `linear_impl` names."""
    if impl not in LINEAR_IMPLS:
        raise UserError(f"linear_impl={impl!r}; valid: {', '.join(LINEAR_IMPLS)}")
    cls = TiledLinear if impl == "tiled" else nn.Linear
    return cls(in_features, out_features, bias=bias)


def _tiled_from(linear: nn.Module) -> TiledLinear:
    """A TiledLinear holding `linear`'s own weight and bias tensors (built on the meta device:
    no new initialisation, so the random stream stays as it was)."""
    out_features, in_features = linear.weight.shape
    has_bias = linear.bias is not None
    tiled = TiledLinear(in_features, out_features, bias=has_bias, device="meta")
    tiled.weight, tiled.bias = linear.weight, linear.bias
    return tiled


def with_linear_impl(impl: Literal["torch", "tiled"], linear: nn.Linear) -> nn.Linear:
    """`linear` itself (torch), or a TiledLinear with the same parameters (tiled)."""
    if impl not in LINEAR_IMPLS:
        raise UserError(f"linear_impl={impl!r}; valid: {', '.join(LINEAR_IMPLS)}")
    return linear if impl == "torch" else _tiled_from(linear)


def tile_linears(module: nn.Module, kinds: tuple[type, ...] = (nn.Linear,)) -> nn.Module:
    """Every layer of exactly one of the classes `kinds` inside `module` (nn.Linear; a net may
    add e.g. PyG's Linear, which computes the same) replaced by a TiledLinear holding the same
    parameters. Subclasses are left alone: they may compute something else."""
    for name, child in list(module.named_children()):
        if type(child) in kinds:
            setattr(module, name, _tiled_from(child))
        else:
            tile_linears(child, kinds)
    return module
