"""The op `litlab::tiled_matmul`: its schema, its kernels per device, its fake and its gradient.

`torch.library.custom_op` makes a function an operator the dispatcher knows, so that
`torch.compile`, `torch.export`, autograd and the ONNX exporter treat it as one opaque node
instead of tracing into (or failing on) a compiled extension:

- the body below is the kernel for devices without their own (it refuses in one line);
- `register_kernel("cpu")` / `("cuda")`: the compiled kernels (`build.py` builds them on first
  use; the op itself is defined without any compiler);
- `register_fake`: output metadata only, what tracing (compile, export, opcheck) runs;
- `register_autograd`: dA = dC @ B^T, dB = A^T @ dC, both through this same op (so gradients,
  and gradients of gradients, run the tiled kernel too).

Inputs: two 2-D tensors (M x K, K x N) or two 3-D tensors with equal batch, any strides, same
dtype and device. `litlab.ops.matmul` adds torch.matmul's broadcasting on top.
"""

import os

import torch
from torch import Tensor

from litlab.errors import UserError

SUPPORTED = (torch.float32, torch.bfloat16, torch.float64)
CUDA_BACKENDS = ("triton", "cuda")


def check(a: Tensor, b: Tensor) -> None:
    """One line for inputs the kernels cannot take; shape checks also hold on symbolic shapes."""
    if a.dtype not in SUPPORTED or b.dtype != a.dtype:
        valid = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED)
        got = f"{a.dtype} and {b.dtype}".replace("torch.", "")
        raise UserError(
            f"litlab::tiled_matmul takes two tensors of one dtype in {valid}; got {got}"
        )
    if a.dim() not in (2, 3) or b.dim() != a.dim():
        raise UserError(
            "litlab::tiled_matmul takes two 2-D or two 3-D (batched) tensors; "
            f"got {a.dim()}-D and {b.dim()}-D (litlab.ops.matmul broadcasts other shapes)"
        )
    if a.device != b.device:
        raise UserError(
            f"litlab::tiled_matmul: inputs on {a.device} and {b.device}; use one device"
        )
    torch._check(
        a.shape[-1] == b.shape[-2],
        lambda: f"litlab::tiled_matmul: inner sizes differ: {tuple(a.shape)} @ {tuple(b.shape)}",
    )
    if a.dim() == 3:
        torch._check(
            a.shape[0] == b.shape[0],
            lambda: f"litlab::tiled_matmul: batch sizes differ: {a.shape[0]} and {b.shape[0]}",
        )


def _out_shape(a: Tensor, b: Tensor) -> tuple:
    return (*a.shape[:-1], b.shape[-1])


@torch.library.custom_op("litlab::tiled_matmul", mutates_args=())
def tiled_matmul(a: Tensor, b: Tensor) -> Tensor:
    """C = A @ B with litlab's tiled kernels (see the module docstring)."""
    check(a, b)
    raise UserError(f"litlab::tiled_matmul has kernels for cpu and cuda tensors; got {a.device}")


@tiled_matmul.register_fake
def _(a: Tensor, b: Tensor) -> Tensor:
    check(a, b)
    return a.new_empty(_out_shape(a, b))


@tiled_matmul.register_kernel("cpu")
def _(a: Tensor, b: Tensor) -> Tensor:
    from litlab.ops import build

    check(a, b)
    build.load_cpu()
    return torch.ops.litlab_kernels.tiled_matmul_cpu(a, b)


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
    check(a, b)
    if cuda_backend() == "triton":
        from litlab.ops.triton_kernel import triton_matmul

        return triton_matmul(a, b)
    from litlab.ops import build

    build.load_cuda()
    return torch.ops.litlab_kernels.tiled_matmul_cuda(a, b)


def _setup_context(ctx, inputs, output) -> None:
    a, b = inputs
    ctx.save_for_backward(
        a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None
    )


def _backward(ctx, grad: Tensor):
    a, b = ctx.saved_tensors
    grad_a = tiled_matmul(grad, b.mT) if ctx.needs_input_grad[0] else None
    grad_b = tiled_matmul(a.mT, grad) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


tiled_matmul.register_autograd(_backward, setup_context=_setup_context)
