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
  registers as well (not at import: torch.onnx is a heavy import a training run never needs).

Build the op's C++/CUDA kernels on first use, once per source version and machine.

`torch.utils.cpp_extension.load` compiles with ninja into a build directory and loads the
library; calling it again with the same sources and flags only re-checks the files. The
directory is per user (`$LITLAB_OPS_CACHE`, else `$XDG_CACHE_HOME/litlab/ops`, else
`~/.cache/litlab/ops`), never the repository, and named by a hash of everything that makes the
binary differ: the sources, the flags, the compiler, torch's version and the CPU's instruction
sets (the code is compiled for this CPU with -march=native, so a home directory shared across a
cluster gets one build per CPU kind instead of an illegal instruction). A missing compiler, ninja or nvcc is told
in one line before any build starts."""

import hashlib
import os
import platform
import shutil
import sys
import sysconfig
import threading
from pathlib import Path

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

    check_operands(a, b)
    load_cpu()
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

    load_cuda()
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


# ----------------------------------------------------------------- build
CSRC = Path(__file__).parent / "csrc"
CPU_SOURCES = ("tiled_matmul_cpu.cpp",)
CUDA_SOURCES = ("tiled_matmul_cuda.cpp", "tiled_matmul_cuda_kernel.cu")
_lock = threading.Lock()
_loaded: set[str] = set()


def cache_root() -> Path:
    """Where built kernels are kept (outside the repository, per user)."""
    if os.environ.get("LITLAB_OPS_CACHE"):
        return Path(os.environ["LITLAB_OPS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "litlab" / "ops"


def _cpu_signature() -> str:
    """The instruction sets -march=native compiles for (x86 flags, or the machine's name)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.machine() + platform.processor()


def cpu_flags() -> list[str]:
    """-O3, code for this CPU (AVX-512/AVX2+FMA/NEON as it has them), FMA contraction (off by
    default in ISO C++ mode) and OpenMP, which at::parallel_for's inline header needs."""
    machine = platform.machine().lower()
    arch = ["-march=native"] if machine in ("x86_64", "amd64") else ["-mcpu=native"]
    omp = [] if sys.platform == "darwin" else ["-fopenmp"]  # Apple clang has no OpenMP
    return ["-O3", *arch, "-ffp-contract=fast", *omp]


def _require(tool: str, what: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise UserError(f"{what} needs {tool!r}, which is not on PATH ({hint})")
    return path


def _with_ninja_on_path() -> None:
    """The `ninja` wheel of requirements.txt puts the binary next to python; cpp_extension looks
    for it on PATH, which a bare `.venv/bin/python` does not extend."""
    scripts = sysconfig.get_path("scripts")
    if scripts and scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def build_dir(name: str, sources: list[Path], flags: list[str]) -> Path:
    import torch

    digest = hashlib.sha256()
    for part in [*(s.read_bytes() for s in sources), *(f.encode() for f in flags)]:
        digest.update(part + b"\0")
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "")  # the GPUs a CUDA build targets
    digest.update(f"{torch.__version__}|{sys.version_info[:2]}|{_cpu_signature()}".encode())
    digest.update(f"{os.environ.get('CXX', 'c++')}|{arch_list}".encode())
    path = cache_root() / f"{name}-{digest.hexdigest()[:16]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cpp_extension():
    """torch.utils.cpp_extension, without its import-time warning about the CUDA runtime on
    machines without a GPU (the console stays quiet; CPU builds do not need it)."""
    import logging

    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        log.setLevel(level)
    return cpp_extension


def _load(name: str, sources: list[Path], cflags: list[str], **kwargs) -> None:
    """Compile (or reuse) and load a library whose TORCH_LIBRARY blocks register its ops."""
    cpp_extension = _cpp_extension()

    with _lock:
        if name in _loaded:
            return
        _with_ninja_on_path()
        what = f"building the {name} kernel (litlab.ops, first use)"
        _require(os.environ.get("CXX", "c++"), what, "install g++ or clang, or set CXX")
        _require("ninja", what, "pip install ninja")
        flags = cflags + kwargs.get("extra_cuda_cflags", [])
        cpp_extension.load(
            name=name,
            sources=[str(s) for s in sources],
            extra_cflags=cflags,
            extra_ldflags=["-fopenmp"] if "-fopenmp" in cflags else [],
            build_directory=str(build_dir(name, sources, flags)),
            is_python_module=False,
            verbose=os.environ.get("LITLAB_OPS_VERBOSE") == "1",
            **kwargs,
        )
        _loaded.add(name)


def load_cpu() -> None:
    """Build/load the CPU kernel: registers torch.ops.litlab_kernels.tiled_matmul_cpu."""
    _load("litlab_tiled_matmul_cpu", [CSRC / s for s in CPU_SOURCES], cpu_flags())


def load_cuda() -> None:
    """Build/load the CUDA kernel: registers torch.ops.litlab_kernels.tiled_matmul_cuda."""
    import torch

    cpp_extension = _cpp_extension()
    what = "the litlab::tiled_matmul CUDA kernel"
    if not torch.cuda.is_available():
        raise UserError(f"{what} needs a CUDA GPU; torch sees none")
    if cpp_extension.CUDA_HOME is None:
        raise UserError(f"{what} needs nvcc (the CUDA toolkit); set CUDA_HOME or put nvcc on PATH")
    _load(
        "litlab_tiled_matmul_cuda",
        [CSRC / s for s in CUDA_SOURCES],
        ["-O3"],
        extra_cuda_cflags=["-O3", "--use_fast_math"],
    )
