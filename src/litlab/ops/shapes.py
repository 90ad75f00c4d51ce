"""torch.matmul's shape rules for the op, around kernels that multiply 2-D or equal-batch 3-D
tensors: 1-D operands become a row or a column (and the size-1 axis is dropped after), batch
axes broadcast, and a 2-D `b` lets `a`'s batch fold into rows (one large product, `b` never
copied: the Linear case)."""

import torch
from torch import Tensor


def out_shape(a: Tensor, b: Tensor) -> tuple:
    """The shape torch.matmul(a, b) has (symbolic sizes stay symbolic)."""
    if a.dim() == 1 and b.dim() == 1:
        return ()
    if b.dim() == 1:
        return tuple(a.shape[:-1])
    if a.dim() == 1:
        return (*b.shape[:-2], b.shape[-1])
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, a.shape[-2], b.shape[-1])


def apply_kernel(kernel, a: Tensor, b: Tensor) -> Tensor:
    """kernel (2-D @ 2-D or 3-D @ 3-D, equal batch) applied with torch.matmul's semantics."""
    a2, b2 = as_row(a), as_column(b)
    if b2.dim() == 2:
        out = kernel(a2.flatten(0, -2), b2)  # flatten, not reshape(-1, k): sizes may be 0
    else:
        batch = torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        a3 = a2.expand(*batch, *a2.shape[-2:])
        b3 = b2.expand(*batch, *b2.shape[-2:])
        out = kernel(_three_d(a3), _three_d(b3))
    return out.reshape(out_shape(a, b))


def _three_d(t: Tensor) -> Tensor:
    return t.unsqueeze(0) if t.dim() == 2 else t.flatten(0, -3)


def as_row(a: Tensor) -> Tensor:
    return a.unsqueeze(0) if a.dim() == 1 else a


def as_column(b: Tensor) -> Tensor:
    return b.unsqueeze(-1) if b.dim() == 1 else b


def restore_axes(grad: Tensor, a_dim: int, b_dim: int) -> Tensor:
    """The output's gradient with the axes that 1-D operands dropped put back."""
    if b_dim == 1:  # first: a 0-D gradient (vector @ vector) has no axis -2 yet
        grad = grad.unsqueeze(-1)
    return grad.unsqueeze(-2) if a_dim == 1 else grad
