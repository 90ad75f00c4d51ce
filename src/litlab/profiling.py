"""Where time and memory go (`profiler=simple|advanced|pytorch`, docs/inspect.md).

Lightning's profilers write their report into a file when given a `dirpath`, and then print
nothing; these print it at the end of each stage too, and write into <run dir>/profiler/
(listed in the run's "Files" summary). The PyTorch one records memory and input shapes,
writes a trace per profiled action (Chrome/TensorBoard format: chrome://tracing, Perfetto or
TensorBoard's profiler plugin) and two `key_averages` tables: by self CPU time and by memory.
`PeakMemory` logs the peak memory of every training epoch."""

import logging
import resource
import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler

from litlab.compat.lightning import PrintedReport, profiler_row_limit, sort_profile_by

log = logging.getLogger(__name__)


class PrintedSimpleProfiler(PrintedReport, SimpleProfiler):
    """Time per Lightning hook (mean, count, total, share of the run)."""


class PrintedAdvancedProfiler(PrintedReport, AdvancedProfiler):
    """cProfile of every hook: time per Python function."""


class MemoryPyTorchProfiler(PrintedReport, PyTorchProfiler):
    """torch.profiler with memory and shapes on; the report holds two tables."""

    def __init__(
        self, filename: str | None = "profiler", record_module_names: bool = False, **kwargs
    ):
        # the rest (dirpath, row_limit, export_to_chrome...) keep Lightning's defaults
        super().__init__(
            profile_memory=True,
            record_shapes=True,
            filename=filename,
            record_module_names=record_module_names,
            **kwargs,
        )
        # torch's table sorts by it; Lightning's argument check does not list it
        sort_profile_by(self, "self_cpu_time_total")

    def summary(self) -> str:
        by_time = super().summary()  # stops the profiler, fills function_events
        if not by_time:
            return ""
        events = self.function_events.key_averages()
        memory_key = (
            "self_device_memory_usage" if torch.cuda.is_available() else "self_cpu_memory_usage"
        )
        by_memory = events.table(sort_by=memory_key, row_limit=profiler_row_limit(self))
        return (
            f"{by_time}\nPyTorch profiler, sorted by {memory_key} "
            f"(memory allocated by the op itself)\n{by_memory}\n"
        )


class PeakMemory(Callback):
    """Per training epoch: `memory/cuda_max_allocated_mb` (and the CUDA memory summary into
    <run dir>/profiler/cuda_memory_summary.txt) on a GPU; `memory/peak_rss_mb` on a CPU."""

    def on_train_epoch_start(self, trainer, pl_module):
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_epoch_end(self, trainer, pl_module):
        if pl_module.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(pl_module.device) / 2**20
            pl_module.log("memory/cuda_max_allocated_mb", peak)
            if trainer.is_global_zero:
                path = Path(trainer.default_root_dir) / "profiler" / "cuda_memory_summary.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a") as f:
                    f.write(
                        f"epoch {trainer.current_epoch}\n"
                        f"{torch.cuda.memory_summary(pl_module.device)}\n"
                    )
        else:
            # ru_maxrss: the process's peak resident set size, KiB on Linux, bytes on macOS
            scale = 2**20 if sys.platform == "darwin" else 2**10
            pl_module.log(
                "memory/peak_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale
            )
