"""Lightning's own display callbacks, adapted: the model summary, the progress bar, the LR
monitor.

Lightning's rich model summary, cut to what a user reads: the modules that hold parameters.
A LitModule also holds its metric collections and loss meters (modules without parameters):
they filled half of Lightning's table with zero rows. Its FLOPs column is all zeros unless the
model was given an `example_input_array`, and the train/eval mode counts tell nothing before
fit; both go. The totals fit on one line.

Lightning's rich progress bar, with its per-batch work throttled to what the eye can see.

Lightning's LearningRateMonitor, which a run without loggers (`logger=null`, debug configs)
can keep: there it does nothing, where Lightning's raises at the start of training."""

import time
from typing import Any

from lightning.pytorch.callbacks import LearningRateMonitor as _LightningMonitor
from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar
from lightning.pytorch.utilities.model_summary import (
    get_formatted_model_size,
    get_human_readable_count,
)

_DROPPED_COLUMNS = {" ", "Mode"}  # the row index, train/eval mode


def compact_columns(summary_data: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """Lightning's summary columns without the zero-parameter rows (all rows if every one is
    zero), the mode column, and the FLOPs column when it is all zeros."""
    columns = dict(summary_data)
    params = columns.get("Params", [])
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
