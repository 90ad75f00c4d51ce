"""The checks every number of an exported file's metadata goes through: a `Bad` names the
first problem (the caller turns it into one UserError line naming the file)."""

import math

MAX_INT = 2**63 - 1
#: what a division may divide by: normalization stds and OOD scales
STD_FLOOR, SCALE_FLOOR = 1e-6, 1e-9


class Bad(Exception):
    """One metadata problem: becomes the UserError naming the file."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise Bad(message)


def number(value, what: str, lo=-math.inf, hi=math.inf, low_open=False) -> float:
    require(
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
        f"{what} is {value!r}; expected a finite number",
    )
    require(
        (value > lo if low_open else value >= lo) and value <= hi,
        f"{what} is {value!r}; expected a number in {'(' if low_open else '['}{lo}, {hi}]",
    )
    return value


def integer(value, what: str, lo: int, hi: int) -> int:
    require(
        isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi,
        f"{what} is {str(value)[:40]!r}; expected an integer in [{lo}, {hi}]",
    )
    return value
