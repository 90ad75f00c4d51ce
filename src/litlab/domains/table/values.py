"""A table's values checked as the net will use them, not only as read: the net computes in
float32 and standardizes each column by the training rows' mean and spread (nets.py), the
metrics sum squared targets in float32. Read in float64, a value can be finite and still be
lost there: beyond float32's range (1e39), overflowing once centred, or one of many values
that differ by less than float32 resolves at their magnitude (int64 ids near 2^40 differ by
units; float32 keeps about 7 significant digits). Each is refused in one line naming the
column and a row, before training, rather than training on zeros or dying at step 0 as a NaN
loss that blames the learning rate."""

import logging

import numpy as np

from litlab.errors import UserError
from litlab.utils.distributed import is_rank_zero

log = logging.getLogger(__name__)

F32_MAX = float(np.finfo(np.float32).max)
#: how far a value standardized in float32 may be from its float64 standardization, in units of
#: its column's spread (or of the value, for one far from the training rows)
RESOLUTION = 0.01
#: the largest target magnitude times sqrt(rows): rmse and r2 sum squared targets in float32
METRIC_LIMIT = float(np.sqrt(F32_MAX)) / 10


def moments(values: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-column mean and standard deviation, in float64 (squares of values near 1e20
    overflow float32); a column whose values are all equal: spread 1 (it standardizes to 0)."""
    values = np.asarray(values, np.float64)
    constant = values.max(0) == values.min(0)
    return values.mean(0).tolist(), np.where(constant, 1.0, values.std(0)).tolist()


def check_columns(values: np.ndarray, mean, std, names: list[str], where: str) -> None:
    """Each column of `values` (float64, rows x columns) standardized in float32 as the net
    does it: finite and within RESOLUTION of its float64 value; else one line naming the
    column and a row that is not (counted from 1, below the header)."""
    for j, name in enumerate(names):
        column = values[:, j]
        at = f"{where}: column '{name}'"
        beyond = np.flatnonzero(np.abs(column) > F32_MAX)
        if beyond.size:
            row = beyond[0]
            raise UserError(
                f"{at}, row {row + 1}: {column[row]:.6g} is beyond float32, the net's dtype "
                f"(magnitudes up to {F32_MAX:.3g}); rescale the column"
            )
        z64 = (column - mean[j]) / std[j]
        with np.errstate(over="ignore", invalid="ignore"):
            z32 = (column.astype(np.float32) - np.float32(mean[j])) / np.float32(std[j])
            error = np.abs(z32 - z64) / np.maximum(1, np.abs(z64))  # inf where z32 overflows
        error[np.isnan(error)] = np.inf
        if not (error > RESOLUTION).any():
            continue
        # the row shown: one that overflows, else the value float32 changes most
        changed = np.abs(column.astype(np.float32) - column)
        row = int(np.argmax(np.where(error > RESOLUTION, changed, -1.0)))
        row = int(np.argmax(error)) if np.isinf(error).any() else row
        value = column[row]
        if not np.isfinite(z32[row]):
            raise UserError(
                f"{at}, row {row + 1}: {value:.6g} overflows float32 (the net's dtype) once "
                f"standardized by the training rows (mean {mean[j]:.3g}, spread {std[j]:.3g}); "
                "rescale the column"
            )
        raise UserError(
            f"{at}: its values (near {mean[j]:.6g}, spread {std[j]:.3g}) differ by less than "
            f"float32, the net's dtype, resolves at that magnitude (row {row + 1}'s "
            f"{value:.17g} reads as {float(np.float32(value)):.17g}); subtract an offset "
            f"from the column (e.g. its minimum, {column.min():.17g}) or rescale it"
        )


def check_target_scale(y: np.ndarray, name: str, where: str) -> None:
    """The metrics in the target's units sum its squares in float32: a target near 1e30 makes
    rmse inf and r2 NaN (the monitor), so the magnitude is bounded by the row count."""
    limit = METRIC_LIMIT / np.sqrt(len(y))
    over = np.flatnonzero(np.abs(y) > limit)
    if over.size:
        row = over[0]
        raise UserError(
            f"{where}: the target '{name}', row {row + 1}: {y[row]:.6g} is too large for the "
            f"metrics in float32 (rmse and r2 sum squared targets: magnitudes up to "
            f"{limit:.3g} for {len(y)} rows); rescale the target (divide the column by a power "
            "of 10)"
        )


def warn_constant_target(y: np.ndarray, split: dict, name: str, where: str) -> None:
    """One warning line when the target does not vary (in the table, or in a split): r2 is
    undefined there and torchmetrics prints it as 0, a number that looks like a result. Said
    by rank 0 only: every DDP rank reads the table."""
    if not is_rank_zero():
        return
    if y.max() == y.min():
        log.warning(
            "%s: the target '%s' is %g in every row: there is nothing to learn, and r2 is "
            "undefined (printed as 0)",
            where,
            name,
            y[0],
        )
        return
    flat = [s for s, rows in split.items() if len(rows) and np.ptp(y[rows]) == 0]
    if flat:
        log.warning(
            "%s: the target '%s' is one value in every row of the %s split: r2 is undefined "
            "there (printed as 0); mae and rmse still hold",
            where,
            name,
            " and ".join(flat),
        )
