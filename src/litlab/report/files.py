"""Reads of the files a report shows. They are data, possibly written by someone else: only
regular files inside the folder reported on are read (a link leading out of it is not
followed), each up to a size; what cannot be read is said on the page, never raised."""

import csv
import io
import json
import math
import os
from pathlib import Path

from litlab.utils.files import kind_of as file_kind

MAX_BYTES = 32 << 20  # any one file shown (a picture, a metrics CSV, a config)
PNG = b"\x89PNG\r\n\x1a\n"


def inside(root: Path, relative: str | Path) -> Path | None:
    """`root/relative` when it is a regular file inside `root` (links resolved) of at most
    MAX_BYTES, else None."""
    base = Path(root).resolve()
    path = (base / relative).resolve()
    if base not in path.parents or not path.is_file():
        return None
    return path if path.stat().st_size <= MAX_BYTES else None


def read_bytes(root: Path, relative: str | Path) -> bytes | None:
    path = inside(root, relative)
    try:
        return path.read_bytes() if path is not None else None
    except OSError:
        return None


def read_text(root: Path, relative: str | Path) -> str | None:
    data = read_bytes(root, relative)
    return None if data is None else data.decode("utf-8", errors="replace")


def unread(root: Path, relative: str | Path) -> str:
    """Why `root/relative` was not read, as the page says it: absent, leading out of the
    folder, no regular file (a pipe is never opened), over its limit, or unreadable."""
    base = Path(root).resolve()
    path = base / relative
    if not os.path.lexists(path):
        return "is absent"
    if base not in path.resolve().parents:
        return "is a link out of the folder reported on (not read)"
    kind = file_kind(path)
    if kind is not None:
        return f"is not a regular file ({kind}; not read)"
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size > MAX_BYTES:
        return f"is over its limit ({size / 2**20:.1f} MiB > {MAX_BYTES >> 20} MiB; not read)"
    return "cannot be read"


def read_json(root: Path, relative: str | Path) -> tuple[object, str | None]:
    """(the parsed value, None), or (None, what is wrong: `unread`'s reason or not JSON)."""
    text = read_text(root, relative)
    if text is None:
        return None, f"{relative} {unread(root, relative)}"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError):  # a crafted deep nesting too
        return None, f"{relative} is not JSON"


def read_csv(root: Path, relative: str | Path) -> list[dict] | None:
    text = read_text(root, relative)
    if text is None:
        return None
    try:
        return list(csv.DictReader(io.StringIO(text)))
    except csv.Error:
        return None


def png(root: Path, relative: str | Path) -> bytes | None:
    """A picture's bytes when the file is a PNG (checked by its signature)."""
    data = read_bytes(root, relative)
    return data if data is not None and data.startswith(PNG) else None


def walk(root: Path, name: str) -> list[Path]:
    """Every regular file called `name` below `root` (linked folders are not entered; a link
    named `name` is left out), sorted."""
    found = []
    for folder, _dirs, names in os.walk(root):  # followlinks=False
        path = Path(folder) / name
        if name in names and not path.is_symlink() and path.is_file():
            found.append(path)
    return sorted(found)


def number(value) -> float | None:
    """A finite float from a cell or JSON value (bools and text that is no number: None)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None
