"""Build the op's C++/CUDA kernels on first use, once per source version and machine.

`torch.utils.cpp_extension.load` compiles with ninja into a build directory and loads the
library; calling it again with the same sources and flags only re-checks the files. The
directory is per user (`$LITLAB_OPS_CACHE`, else `$XDG_CACHE_HOME/litlab/ops`, else
`~/.cache/litlab/ops`), never the repository, and named by a hash of everything that makes the
binary differ: the sources, the flags, the compiler, torch's version and the CPU's instruction
sets (the code is compiled for this CPU with -march=native, so a home directory shared across a
cluster gets one build per CPU kind instead of an illegal instruction). A missing compiler, ninja or nvcc is told
in one line before any build starts.
"""

import hashlib
import os
import platform
import shutil
import sys
import sysconfig
import threading
from pathlib import Path

from litlab.errors import UserError

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
