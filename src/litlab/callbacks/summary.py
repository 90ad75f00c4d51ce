"""Lightning's own display callbacks and profilers, adapted (docs/inspect.md).

Lightning's rich model summary, cut to what a user reads: the modules that hold parameters.
A LitModule also holds its metric collections and loss meters (modules without parameters):
they filled half of Lightning's table with zero rows. Its FLOPs column is all zeros unless the
model was given an `example_input_array`, and the train/eval mode counts tell nothing before
fit; both go. The totals fit on one line.

Lightning's LearningRateMonitor, which a run without loggers (`logger=null`, debug configs)
can keep: there it does nothing, where Lightning's raises at the start of training.

Lightning's profilers (`profiler=simple|advanced|pytorch`: where time and memory go) write
their report into a file when given a `dirpath`, and then print nothing; these print it at the
end of each stage too, and write into <run dir>/profiler/ (listed in the run's "Files"
summary). The PyTorch one records memory and input shapes, writes a trace per profiled action
(Chrome/TensorBoard format: chrome://tracing, Perfetto or TensorBoard's profiler plugin) and
two `key_averages` tables: by self CPU time and by memory."""

import logging
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback, RichModelSummary, RichProgressBar
from lightning.pytorch.callbacks import LearningRateMonitor as _LightningMonitor
from lightning.pytorch.profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler
from lightning.pytorch.utilities.model_summary import (
    get_formatted_model_size,
    get_human_readable_count,
)

from litlab.compat.lightning import PrintedReport, profiler_row_limit, sort_profile_by

_DROPPED_COLUMNS = {" ", "Mode"}  # the row index, train/eval mode


def compact_columns(summary_data: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """Lightning's summary columns without the zero-parameter rows (all rows if every one is
    zero), the mode column, and the FLOPs column when it is all zeros."""
    params = dict(summary_data).get("Params", [])
    keep = [i for i, value in enumerate(params) if value.strip() not in ("0", "")]
    keep = keep or list(range(len(params)))
    out = []
    for name, values in summary_data:
        values = [values[i] for i in keep]
        if name in _DROPPED_COLUMNS:
            continue
        if name == "FLOPs" and all(v.strip() in ("0", "") for v in values):
            continue
        out.append((name, values))
    return out


def totals_line(total: int, trainable: int, model_size: float, flops: int) -> str:
    """Parameters (trainable, frozen), size in MB and, when counted, FLOPs: one line."""
    line = (
        f"params: {get_human_readable_count(int(trainable)).strip()} trainable, "
        f"{get_human_readable_count(int(total - trainable)).strip()} frozen, "
        f"{get_formatted_model_size(model_size).strip()} MB"
    )
    if flops:
        line += f", {get_human_readable_count(int(flops)).strip()} FLOPs"
    return line


class CompactModelSummary(RichModelSummary):
    """`RichModelSummary` with only the modules that have parameters, and one totals line."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        from rich import box, get_console
        from rich.table import Table

        columns = compact_columns(summary_data)
        table = Table(
            header_style=summarize_kwargs.get("header_style", "bold magenta"),
            box=box.SIMPLE_HEAD,
            show_edge=False,  # no blank lines above and below
        )
        for name, _ in columns:
            numeric = name in ("Params", "Params per Device", "FLOPs", "In sizes", "Out sizes")
            table.add_column(name, justify="right" if numeric else "left", no_wrap=True)
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        console.print(totals_line(total_parameters, trainable_parameters, model_size, total_flops))


# -------------------------------------------------------------- progress
class ThrottledRichProgressBar(RichProgressBar):
    """Updates the training bar and its metrics at most `refresh_rate` times a second.

    Lightning's bar advances its task and re-reads every logged metric after each training
    batch, about 0.1 ms: 1% of a small model's step (bench/overhead.py). Frames are drawn
    `refresh_rate` times a second anyway; the last batch of an epoch is always shown.
    """

    def __init__(self, refresh_rate: int = 10, **kwargs):
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self._next_update = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        last = batch_idx + 1 >= self.total_train_batches
        if now < self._next_update and not last and self.train_progress_bar_id is not None:
            return
        self._next_update = now + 1 / max(self.refresh_rate, 1)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


# ------------------------------------------------------------ lr monitor
class LearningRateMonitor(_LightningMonitor):
    def on_train_start(self, trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_start(trainer, *args, **kwargs)

    def on_train_batch_start(self, trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_batch_start(trainer, *args, **kwargs)

    def on_train_epoch_start(self, trainer, *args, **kwargs) -> None:
        if trainer.loggers:
            super().on_train_epoch_start(trainer, *args, **kwargs)


log = logging.getLogger(__name__)


# ------------------------------------------------------------- profilers
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
                summary = torch.cuda.memory_summary(pl_module.device)
                with open(path, "a") as f:
                    f.write(f"epoch {trainer.current_epoch}\n{summary}\n")
        else:
            # ru_maxrss: the process's peak resident set size, KiB on Linux, bytes on macOS
            scale = 2**20 if sys.platform == "darwin" else 2**10
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale
            pl_module.log("memory/peak_rss_mb", peak)
