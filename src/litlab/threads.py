"""CPU threads of a run: `threads=auto` (default), `threads=N`, or `threads=null` (torch's own).

Why: torch starts one OpenMP thread per core, and a thread that finds its core taken by another
job holds every parallel op back. On a 2-core machine with other jobs on it, the default digits
run took 3-7x longer with torch's 2 threads than with 1 (BENCHMARKS.md, "Threads").
`auto` takes the cores this process may use (its CPU affinity), subtracts the cores other jobs
keep busy, and splits what is left between the run's local processes (DDP): never less than one.
Busy is the 1-minute load average, and where that says a core is taken, what the cores do now
(`busy_now`, a fifth of a second of /proc/stat): the average still counts a job that ended a
minute ago, and a long run started right after another would keep one thread of two for its
whole length (an hour's recipe on 2 cores read 0.52 so). A quiet machine pays no look.
An `OMP_NUM_THREADS` already in the environment wins over `auto` (the test suite sets 1).

`apply` runs from `RunEnd.run` (litlab.runs.run_end: every route), before the task imports
torch: it exports the count as OMP_NUM_THREADS/MKL_NUM_THREADS, and OMP_WAIT_POLICY=PASSIVE
unless set, which torch, its DDP child processes and dataloader workers read. If torch is already imported (a later job of a
multirun), it calls torch.set_num_threads. The count stays in the environment, so the later
jobs of a multirun keep the first job's decision (the load they would see is their own).
A job of `hydra/launcher=parallel` finds its share of the cores in LITLAB_JOB_CORES (the
launcher split the free cores between its jobs once; the load the job would see is its
siblings'): `auto` splits that share between the job's own processes.
ONNX Runtime sessions take their count here too (`ort_session`).
"""

import os
import sys
import time

from litlab.errors import UserError

# the cores a parallel launcher gave this job (hydra_plugins.litlab_launchers.parallel)
JOB_CORES = "LITLAB_JOB_CORES"


def cores() -> int:
    """CPU cores this process may run on (taskset/cgroup affinity), not the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def free_cores(processes: int = 1) -> int:
    """Cores not busy with other jobs, per local process; at least 1 (module docstring)."""
    try:
        busy = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform
        busy = 0.0
    if round(busy) > 0:  # the average says a core is taken: is it taken now?
        now = busy_now()
        busy = busy if now is None else now
    free = min(cores(), int(cores() - busy + 0.5))
    return max(1, free // max(1, processes))


def busy_now(seconds: float = 0.2, stat: str = "/proc/stat") -> float | None:
    """Cores of this process's affinity that other processes kept busy over `seconds` (this
    one sleeps meanwhile), from `stat`'s per-CPU times; None where there is no such file, or
    one of another shape (the load average decides then)."""
    mine = (
        {f"cpu{n}" for n in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else None
    )

    def times() -> dict[str, tuple[int, int]]:
        out = {}
        with open(stat) as f:
            for line in f:
                name, *fields = line.split()
                if name.startswith("cpu") and name != "cpu" and (mine is None or name in mine):
                    user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
                    busy = user + nice + system + irq + softirq + steal
                    out[name] = (busy, busy + idle + iowait)
        return out

    try:
        before = times()
        time.sleep(seconds)
        after = times()
    except (OSError, ValueError):  # not Linux, or a /proc/stat of another shape
        return None
    busy = 0.0
    for name, (b1, t1) in after.items():
        b0, t0 = before.get(name, (b1, t1))
        busy += (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
    return busy if after else None


def limit() -> int:
    """The most threads a run may ask for: the machine's logical CPUs. More only wait on each
    other (and `threads=100000` would have torch start that many)."""
    return max(os.cpu_count() or 1, cores())


def check_threads(setting) -> int | None:
    """The count a `threads` setting names (None for auto or null), or one line: a positive
    integer up to `limit()`. Checked for every job of a sweep before the first starts."""
    if setting is None or str(setting).lower() in ("null", "none", "torch", "auto"):
        return None
    text = str(setting).strip()
    digits = not isinstance(setting, bool) and text.isdigit() and len(text) < 10
    count = int(text) if digits else 0  # 1.5, -1, "many" or true are not counts
    if not 1 <= count <= limit():
        raise UserError(
            f"threads={setting} is not valid; use auto, an integer from 1 to {limit()} (this "
            "machine's CPUs), or null (torch's default: one thread per core)"
        )
    return count


def choose(setting, processes: int = 1) -> int | None:
    """Thread count for a `threads` setting: auto | N | null (None: torch decides)."""
    count = check_threads(setting)
    if count is not None:
        return count
    if setting is None or str(setting).lower() != "auto":
        return None
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    share = os.environ.get(JOB_CORES, "")
    if share.isdigit() and int(share) > 0:
        return max(1, int(share) // max(1, processes))
    return free_cores(processes)


def local_processes(cfg) -> int:
    """Processes this run starts on this machine: trainer.devices when it is a number."""
    from omegaconf import OmegaConf

    try:
        devices = OmegaConf.select(cfg, "trainer.devices", default=1)
    except Exception:  # noqa: BLE001  (an interpolation that needs torch: count one)
        return 1
    return devices if isinstance(devices, int) and devices > 0 else 1


def apply(cfg) -> int | None:
    """Set the thread count chosen from `cfg.threads` (see the module docstring); returns it."""
    count = choose(cfg.get("threads", "auto"), local_processes(cfg))
    if count is None:
        return None
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[key] = str(count)
    # threads that sleep while they wait, instead of spinning: if other jobs start after this
    # run chose its count, 2 threads on 2 busy cores ran 3.4x faster so (BENCHMARKS.md)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(count)
    return count


def ort_session(path, threads: int | None = None):
    """A CPU ONNX Runtime session with all graph optimizations and `threads` intra-op threads
    (None: torch's, as `threads=` set them). Export, eval and serve open their files with it;
    torch is imported only for None, so serve.py serves an image or a table without torch."""
    import onnxruntime as ort

    if threads is None:
        import torch

        threads = torch.get_num_threads()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
