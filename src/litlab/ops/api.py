"""What a model uses: `matmul` (torch.matmul's broadcasting over the op) and `TiledLinear`."""

from typing import Literal

import torch
from torch import Tensor, nn

from litlab.errors import UserError
from litlab.ops.op import tiled_matmul

LINEAR_IMPLS = ("torch", "tiled")


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul for inputs of 2 or more dimensions, computed by `litlab::tiled_matmul`:
    batch dimensions broadcast; a 2-D `b` folds `a`'s batch into rows (one big product, no
    copies of b, the Linear case)."""
    if a.dim() < 2 or b.dim() < 2:
        raise UserError(
            f"litlab.ops.matmul takes tensors of 2 or more dimensions; got {a.dim()}-D and {b.dim()}-D"
        )
    if b.dim() == 2:
        if a.dim() == 2:
            return tiled_matmul(a, b)
        rows = tiled_matmul(a.reshape(-1, a.shape[-1]), b)
        return rows.reshape(*a.shape[:-1], b.shape[-1])
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b3 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
    return tiled_matmul(a3, b3).reshape(*batch, a.shape[-2], b.shape[-1])


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
