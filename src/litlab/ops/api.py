"""What a model uses: `matmul` (torch.matmul's broadcasting over the op) and `TiledLinear`."""

from typing import Literal

from torch import Tensor, nn

from litlab.errors import UserError
from litlab.ops.op import tiled_matmul

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


def with_linear_impl(impl: Literal["torch", "tiled"], linear: nn.Linear) -> nn.Linear:
    """`linear` itself (torch), or a TiledLinear holding the same parameter tensors (tiled): no
    new initialisation, so the random stream, and a torch run's starting weights, stay as they
    were."""
    if impl not in LINEAR_IMPLS:
        raise UserError(f"linear_impl={impl!r}; valid: {', '.join(LINEAR_IMPLS)}")
    if impl == "torch":
        return linear
    has_bias = linear.bias is not None
    tiled = TiledLinear(linear.in_features, linear.out_features, bias=has_bias, device="meta")
    tiled.weight, tiled.bias = linear.weight, linear.bias
    return tiled
