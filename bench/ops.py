"""GFLOP/s of litlab::tiled_matmul's kernels against torch.matmul, side by side.

    .venv/bin/python bench/ops.py                          # CPU: 256..2048 squares, 1 and all threads
    .venv/bin/python bench/ops.py --sizes 1024 --reps 15   # one size, more pairs
    .venv/bin/python bench/ops.py --device cuda            # GPU: Triton and CUDA kernels vs cuBLAS

CPU: the C++ kernel (fp32) against torch.matmul (MKL/oneDNN, the practical limit of a CPU).
Each pair of calls alternates the two (ours, torch, ours, torch, ...) after a warm-up, so both
see the same machine load; the table gives the median of each and the median of the per-pair
ratios, and the best call of each (the one least disturbed by other jobs: closest to what
the kernel does on an idle core). One-thread rows pin the process to one core (`--core`, default the last) and set
torch.set_num_threads(1); "all" uses every core the process may run on. The 1-minute load
average before each block is printed: on a shared machine, ratios hold better than GFLOP/s.
GPU: fp32 and bf16, CUDA events, the Triton kernel (autotuned on first call) and the CUDA C++
kernel against torch.matmul (cuBLAS; TF32 off for fp32, as the kernels compute in IEEE fp32).
The figures are in BENCHMARKS.md ("Custom op").
"""

import argparse
import os
import statistics
import sys
import time

from common import ROOT, table

sys.path.insert(0, str(ROOT / "src"))


def pairs(ours, ref, args, reps: int, sync=lambda: None) -> tuple[list[float], list[float]]:
    """Alternating timings (seconds) of ours(*args) and ref(*args), after a warm-up call each."""
    ours(*args), ref(*args)
    sync()
    t_ours, t_ref = [], []
    for _ in range(reps):
        for fn, out in ((ours, t_ours), (ref, t_ref)):
            start = time.perf_counter()
            fn(*args)
            sync()
            out.append(time.perf_counter() - start)
    return t_ours, t_ref


def row(label, n, t_ours, t_ref) -> list:
    flops = 2 * n**3 / 1e9
    g_ours, g_ref = flops / statistics.median(t_ours), flops / statistics.median(t_ref)
    ratio = statistics.median(r / o for o, r in zip(t_ours, t_ref, strict=True))
    best = f"{flops / min(t_ours):.1f} / {flops / min(t_ref):.1f}"
    return [label, f"{n}²", f"{g_ours:.1f}", f"{g_ref:.1f}", f"**{ratio:.2f}x**", best]


def cpu(sizes, reps, core) -> list[list]:
    import torch

    from litlab.ops import tiled_matmul

    tiled_matmul(torch.ones(2, 2), torch.ones(2, 2))  # build (or load) the kernel first
    allowed = os.sched_getaffinity(0)
    rows = []
    for threads in ("1", "all"):
        if threads == "1":
            os.sched_setaffinity(0, {core if core is not None else max(allowed)})
            torch.set_num_threads(1)
        else:
            os.sched_setaffinity(0, allowed)
            torch.set_num_threads(len(allowed))
        load = os.getloadavg()[0]
        for n in sizes:
            a, b = torch.randn(n, n), torch.randn(n, n)
            t_ours, t_ref = pairs(tiled_matmul, torch.matmul, (a, b), reps)
            label = f"{torch.get_num_threads()} thread(s), load {load:.1f}"
            rows.append(row(label, n, t_ours, t_ref))
            print(" | ".join(rows[-1]), file=sys.stderr)
    os.sched_setaffinity(0, allowed)
    return rows


def cuda(sizes, reps) -> list[list]:
    import torch

    from litlab.ops import tiled_matmul

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: the GPU rows need one (run this on a GPU machine)")
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for backend in ("triton", "cuda"):
        os.environ["LITLAB_OPS_CUDA_BACKEND"] = backend
        for dtype in (torch.float32, torch.bfloat16):
            for n in sizes:
                a = torch.randn(n, n, device="cuda", dtype=dtype)
                b = torch.randn(n, n, device="cuda", dtype=dtype)
                t_ours, t_ref = pairs(
                    tiled_matmul, torch.matmul, (a, b), reps, torch.cuda.synchronize
                )
                name = str(dtype).removeprefix("torch.")
                rows.append(
                    row(f"{backend} {name}, {torch.cuda.get_device_name()}", n, t_ours, t_ref)
                )
                print(" | ".join(rows[-1]), file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--reps", type=int, default=7, help="alternating pairs per size")
    parser.add_argument("--core", type=int, default=None, help="the core of the 1-thread rows")
    args = parser.parse_args()
    if args.device == "cpu":
        rows = cpu(args.sizes, args.reps, args.core)
    else:
        rows = cuda(args.sizes, args.reps)
    ref = "torch.matmul GFLOP/s" + (" (MKL/oneDNN)" if args.device == "cpu" else " (cuBLAS)")
    header = ["setting", "size", "tiled_matmul GFLOP/s", ref, "ours / torch", "best: ours / torch"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
