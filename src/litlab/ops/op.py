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
device; `shapes.apply_kernel` brings them to the kernels' 2-D / equal-batch 3-D form.
"""

import os

import torch
from torch import Tensor

from litlab.errors import UserError
from litlab.ops import shapes

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
    return a.new_empty(shapes.out_shape(a, b))


@tiled_matmul.register_kernel("cpu")
def _(a: Tensor, b: Tensor) -> Tensor:
    from litlab.ops import build

    check_operands(a, b)
    build.load_cpu()
    return shapes.apply_kernel(torch.ops.litlab_kernels.tiled_matmul_cpu, a, b)


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
            return shapes.apply_kernel(triton_matmul, a, b)
    from litlab.ops import build

    build.load_cuda()
    return shapes.apply_kernel(torch.ops.litlab_kernels.tiled_matmul_cuda, a, b)


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
    g2 = shapes.restore_axes(grad, len(ctx.a_shape), len(ctx.b_shape))
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        a2_shape = (1, *ctx.a_shape) if len(ctx.a_shape) == 1 else ctx.a_shape
        grad_a = tiled_matmul(g2, shapes.as_column(b).mT)
        grad_a = grad_a.sum_to_size(a2_shape).reshape(ctx.a_shape)
    if ctx.needs_input_grad[1]:
        a2 = shapes.as_row(a)
        if len(ctx.b_shape) <= 2:  # a's batch folded into rows: one (K x rows) @ (rows x N)
            grad_b = tiled_matmul(a2.flatten(0, -2).mT, g2.flatten(0, -2))
        else:
            grad_b = tiled_matmul(a2.mT, g2).sum_to_size(ctx.b_shape)
        grad_b = grad_b.reshape(ctx.b_shape)
    return grad_a, grad_b


tiled_matmul.register_autograd(_backward, setup_context=_setup_context)
for _device in ("cpu", "cuda"):
    torch.library.register_autocast("litlab::tiled_matmul", _device, torch.bfloat16)
