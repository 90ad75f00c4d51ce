"""The op `litlab::tiled_matmul`: its schema, its kernels per device, its fake and its gradient.

`torch.library.custom_op` makes a function an operator the dispatcher knows, so that
`torch.compile`, `torch.export`, autograd and the ONNX exporter treat it as one opaque node
instead of tracing into (or failing on) a compiled extension:

- the body below is the kernel for devices without their own (it refuses in one line);
- `register_kernel("cpu")` / `("cuda")`: the compiled kernels (`build.py` builds them on first
  use; the op itself is defined without any compiler);
- `register_fake`: output metadata only, what tracing (compile, export, opcheck) runs;
- `register_autocast`: under bf16/fp16 mixed precision both inputs are cast to bfloat16 (the
  low-precision dtype the kernels have), as autocast does for aten.mm, instead of meeting an
  fp32 weight and a bf16 activation;
- `register_autograd`: dA = dC @ B^T, dB = A^T @ dC, both through this same op (so gradients,
  and gradients of gradients, run the tiled kernel too), summed over broadcast batch axes.

Inputs follow torch.matmul (1-D, 2-D, batched with broadcasting; any strides), one dtype, one
device; `apply_kernel` (below) brings them to the kernels' 2-D / equal-batch 3-D form.

torch.matmul's shape rules for the op, around kernels that multiply 2-D or equal-batch 3-D
tensors: 1-D operands become a row or a column (and the size-1 axis is dropped after), batch
axes broadcast, and a 2-D `b` lets `a`'s batch fold into rows (one large product, `b` never
copied: the Linear case).

How ONNX export sees the op: as the standard `MatMul` node (same semantics for 2-D and
batched 3-D inputs), so an exported model runs in any ONNX runtime without this extension.

- the dynamo exporter (`torch.onnx.export(dynamo=True)`, litlab's default) takes a
  `custom_translation_table`: `litlab.export.onnx` passes `translations()`;
- the legacy TorchScript exporter (litlab's fallback) uses the symbolic that `translations()`
  registers as well (not at import: torch.onnx is a heavy import a training run never needs)."""

import os

import torch
from torch import Tensor

from litlab.errors import UserError

SUPPORTED = (torch.float32, torch.bfloat16, torch.float64)
CUDA_BACKENDS = ("triton", "cuda")


def check_operands(a: Tensor, b: Tensor) -> None:
    """One line for inputs the kernels cannot take; shape checks also hold on symbolic shapes."""
    if a.dtype not in SUPPORTED or b.dtype != a.dtype:
        valid = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED)
        got = f"{a.dtype} and {b.dtype}".replace("torch.", "")
        raise UserError(
            f"litlab::tiled_matmul takes two tensors of one dtype in {valid}; got {got}"
        )
    if a.dim() == 0 or b.dim() == 0:
        raise UserError(
            f"litlab::tiled_matmul takes tensors of 1 or more dimensions; got {a.dim()}-D and "
            f"{b.dim()}-D (as torch.matmul)"
        )
    if a.device != b.device:
        raise UserError(
            f"litlab::tiled_matmul: inputs on {a.device} and {b.device}; use one device"
        )
    k_a, k_b = a.shape[-1], b.shape[0] if b.dim() == 1 else b.shape[-2]
    from litlab.compat.torch import assume

    assume(
        k_a == k_b,
        lambda: f"litlab::tiled_matmul: inner sizes differ: {tuple(a.shape)} @ {tuple(b.shape)}",
    )


@torch.library.custom_op("litlab::tiled_matmul", mutates_args=())
def tiled_matmul(a: Tensor, b: Tensor) -> Tensor:
    """C = A @ B with litlab's tiled kernels (see the module docstring)."""
    check_operands(a, b)
    raise UserError(f"litlab::tiled_matmul has kernels for cpu and cuda tensors; got {a.device}")


@tiled_matmul.register_fake
def _(a: Tensor, b: Tensor) -> Tensor:
    check_operands(a, b)
    return a.new_empty(out_shape(a, b))


@tiled_matmul.register_kernel("cpu")
def _(a: Tensor, b: Tensor) -> Tensor:
    from litlab.ops import build

    check_operands(a, b)
    build.load_cpu()
    return apply_kernel(torch.ops.litlab_kernels.tiled_matmul_cpu, a, b)


def cuda_backend() -> str:
    """`LITLAB_OPS_CUDA_BACKEND` (triton | cuda); by default Triton when it is installed."""
    choice = os.environ.get("LITLAB_OPS_CUDA_BACKEND")
    if choice is None:
        try:
            import triton  # noqa: F401

            return "triton"
        except ImportError:
            return "cuda"
    if choice not in CUDA_BACKENDS:
        raise UserError(f"LITLAB_OPS_CUDA_BACKEND={choice!r}; valid: {', '.join(CUDA_BACKENDS)}")
    return choice


@tiled_matmul.register_kernel("cuda")
def _(a: Tensor, b: Tensor) -> Tensor:
    check_operands(a, b)
    if cuda_backend() == "triton":
        from litlab.ops.triton_kernel import triton_matmul

        with torch.cuda.device(a.device):  # Triton launches on the current device
            return apply_kernel(triton_matmul, a, b)
    from litlab.ops import build

    build.load_cuda()
    return apply_kernel(torch.ops.litlab_kernels.tiled_matmul_cuda, a, b)


def _setup_context(ctx, inputs, output) -> None:
    a, b = inputs
    ctx.a_shape, ctx.b_shape = a.shape, b.shape
    ctx.save_for_backward(
        a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None
    )


def _backward(ctx, grad: Tensor):
    """torch.matmul's gradients, each one product through this op, summed over the batch axes
    an input was broadcast along."""
    a, b = ctx.saved_tensors
    g2 = restore_axes(grad, len(ctx.a_shape), len(ctx.b_shape))
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        a2_shape = (1, *ctx.a_shape) if len(ctx.a_shape) == 1 else ctx.a_shape
        grad_a = tiled_matmul(g2, as_column(b).mT)
        grad_a = grad_a.sum_to_size(a2_shape).reshape(ctx.a_shape)
    if ctx.needs_input_grad[1]:
        a2 = as_row(a)
        if len(ctx.b_shape) <= 2:  # a's batch folded into rows: one (K x rows) @ (rows x N)
            grad_b = tiled_matmul(a2.flatten(0, -2).mT, g2.flatten(0, -2))
        else:
            grad_b = tiled_matmul(a2.mT, g2).sum_to_size(ctx.b_shape)
        grad_b = grad_b.reshape(ctx.b_shape)
    return grad_a, grad_b


tiled_matmul.register_autograd(_backward, setup_context=_setup_context)
for _device in ("cpu", "cuda"):
    torch.library.register_autocast("litlab::tiled_matmul", _device, torch.bfloat16)


# ---------------------------------------------------------------- shapes
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


# ------------------------------------------------------------------ onnx
def _matmul_symbolic(g, a, b):
    return g.op("MatMul", a, b)


def translations() -> dict:
    """{op overload: onnxscript function} for torch.onnx.export(custom_translation_table=...);
    registers the legacy exporter's symbolic too."""
    from onnxscript import opset18 as op

    torch.onnx.register_custom_op_symbolic("litlab::tiled_matmul", _matmul_symbolic, 9)

    def matmul_node(a, b):
        return op.MatMul(a, b)

    from litlab.compat.torch import op_overload

    return {op_overload(tiled_matmul): matmul_node}
