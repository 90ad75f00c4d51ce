"""A JSON request body, parsed once it is known to hold only numbers nested a few deep (what
each kind then decodes it to: `Kind.json`), and the affine that normalizes 8-bit pixels;
anything wrong is a `BadRequest` with a status code and one sentence."""

import functools
import json
import re

import numpy as np

from litlab.tasks.checks import BadRequest

#: JSON strings (keys): removed before looking for literals and brackets
STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: +1 for [ and {, -1 for ] and }
NESTING = np.zeros(256, np.int8)
NESTING[[91, 123]], NESTING[[93, 125]] = 1, -1


def depth(stripped: bytes) -> int:
    """Deepest bracket nesting of a JSON text without its strings (vectorized, no parsing)."""
    steps = NESTING[np.frombuffer(stripped, np.uint8)]
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def parse_json(body: bytes, max_depth: int = 8) -> dict:
    """The body as a JSON object whose values hold only numbers, nested at most `max_depth`
    deep: checked on the text before it is parsed (deep nesting never reaches the parser)."""
    if not body.strip():
        raise BadRequest("The request body is empty.")
    stripped = STRING.sub(b'""', body)
    if (d := depth(stripped)) > max_depth:
        raise BadRequest(
            f"The JSON body is nested {d} deep; the limit is {max_depth} "
            "(serve setting max_json_depth).",
            422,
        )
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest('The JSON body must be an object, e.g. {"inputs": [...]}.', 422)
    if any(word in stripped for word in (b"true", b"false", b"null")):  # no number has them
        raise BadRequest("JSON inputs hold only numbers: no true, false or null.", 422)
    return data


def _no_constant(name: str):
    raise BadRequest(f"JSON inputs must be finite numbers, not {name}.", 422)


@functools.lru_cache(maxsize=8)
def affine(mean: tuple, std: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(1 / (255 std), -mean / std) per channel: 8-bit pixels normalized in one pass."""
    m = np.asarray(mean, np.float32).reshape(-1, 1, 1)
    s = np.asarray(std, np.float32).reshape(-1, 1, 1)
    return 1 / (255 * s), -m / s
