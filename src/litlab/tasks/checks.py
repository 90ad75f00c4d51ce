"""The checks of values from elsewhere that the kinds and the service share: a request's arrays
(`BadRequest`: an HTTP status and one sentence, never an exception that reaches a 500) and an
exported file's metadata (`Bad`: its first problem, which the service turns into one UserError
line naming the file). Pure Python and numpy, imported by the kinds' methods when they run."""

import math

MAX_INT = 2**63 - 1
#: what a division may divide by: normalization stds and OOD scales
STD_FLOOR, SCALE_FLOOR = 1e-6, 1e-9
#: sizes an exported file's metadata may declare (image and volume sides: litlab.bounds's,
#: which a training run's settings are held to as well)
MAX_CHANNELS, MAX_FEATURES = 64, 1_000_000
#: floats in one sample (x channels): the warm-up allocates one (2^26 float32: 256 MiB)
MAX_SAMPLE_VALUES = 1 << 26


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class Bad(Exception):
    """One metadata problem: becomes the UserError naming the file."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise Bad(message)


def check_number(value, what: str, lo=-math.inf, hi=math.inf) -> float:
    require(
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
        f"{what} is {value!r}; expected a finite number",
    )
    require(lo <= value <= hi, f"{what} is {value!r}; expected a number in [{lo}, {hi}]")
    return value


def integer(value, what: str, lo: int, hi: int) -> int:
    require(
        isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi,
        f"{what} is {str(value)[:40]!r}; expected an integer in [{lo}, {hi}]",
    )
    return value


def listed(value, what: str, length: int | None = None, max_len: int = 4096) -> list:
    """`value` as a list of `length` items (any length up to `max_len` when None)."""
    require(isinstance(value, list), f"{what} is not a list")
    n = length if length is not None else len(value)
    require(
        len(value) == n and len(value) <= max_len,
        f"{what} has {len(value)} items; expected {length if length is not None else f'<= {max_len}'}",
    )
    return value


def sample_size(shape: list, what: str) -> None:
    """One sample of `shape` (ints) fits in memory: the warm-up and each request make one."""
    require(
        math.prod(shape) <= MAX_SAMPLE_VALUES,
        f"{what} {shape} holds {math.prod(shape):,} values per sample; at most "
        f"{MAX_SAMPLE_VALUES:,}",
    )


def sample_shape(inputs: dict, rank: int | None = None) -> list:
    """`inputs.x.shape`: a batch axis, then a fixed size per dimension (`rank` in all)."""
    shape = listed(inputs["x"].get("shape"), "inputs.x.shape", rank, max_len=8)
    require(len(shape) >= 2, f"inputs.x.shape is {shape}; expected ['batch', sizes...]")
    for s in shape[1:]:
        integer(s, "a sample size in inputs.x.shape", 1, MAX_FEATURES)
    sample_size(shape[1:], "inputs.x.shape")
    return shape


def normalization(norm, channels: int) -> None:
    """Per-channel `mean` and `std` (a std above the floor: dividing by 1e-300 is inf)."""
    require(isinstance(norm, dict), "inputs.x.normalization is missing")
    for v in listed(norm.get("mean"), "inputs.x.normalization.mean", channels):
        check_number(v, "a normalization mean", -1e3, 1e3)
    for v in listed(norm.get("std"), "inputs.x.normalization.std", channels):
        check_number(v, "a normalization std", STD_FLOOR, 1e3)


def array(value, name: str, dtype, ndim: int):
    """A JSON list as a numeric array of `ndim` dims, finite in float32 (integers: exact), or
    a 422 saying what is wrong. Strings, booleans and null are refused, never converted."""
    import numpy as np

    if not isinstance(value, list):
        raise BadRequest(f"'{name}' must be a JSON array.", 422)
    try:
        out = np.array(value)  # ints -> int64, numbers -> float64; anything else shows in kind
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise BadRequest(f"'{name}' must be a rectangular array of numbers.", 422) from None
    if out.dtype.kind not in "iuf" and not (out.size == 0 and out.dtype.kind == "f"):
        raise BadRequest(
            f"'{name}' must be a rectangular array of numbers (no strings or huge integers).",
            422,
        )
    if out.ndim != ndim:
        raise BadRequest(f"'{name}' must have {ndim} dimensions, not {out.ndim}.", 422)
    if not np.isfinite(out).all():
        raise BadRequest(f"'{name}' holds NaN or infinite values.", 422)
    if out.size and np.abs(out).max() > float(np.finfo(np.float32).max):
        raise BadRequest(f"'{name}' holds values outside the float32 range (|x| <= 3.4e38).", 422)
    if np.issubdtype(dtype, np.integer):
        if out.size and np.abs(out).max() > 2**53:
            raise BadRequest(f"'{name}' holds integers too large for a node index.", 422)
        if (out != np.round(out)).any():
            raise BadRequest(f"'{name}' must hold integers.", 422)
    out = out.astype(dtype)
    if out.dtype.kind == "f" and not np.isfinite(out).all():  # what the model is fed
        raise BadRequest(f"'{name}' holds values that are not finite as {out.dtype}.", 422)
    return out


def count(n: int, max_items: int, what: str = "items") -> None:
    if n == 0:
        raise BadRequest(f"The request holds no {what}.", 422)
    if n > max_items:
        raise BadRequest(f"The request holds {n} {what}; the limit is {max_items}.", 413)
