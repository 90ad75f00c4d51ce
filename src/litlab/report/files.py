"""Reads of the files a report shows. They are data, possibly written by someone else: only
regular files inside the folder reported on are read (a link leading out of it is not
followed), each up to a size; what cannot be read is said on the page, never raised.

A sweep's jobs, read from the records its jobs leave (`sweep_job.json`, written by
`litlab.sweeps.summary`). The records are data: one that does not have the shape the summary
writes is left out and named on the page; every value shown is a plain one."""

import csv
import io
import json
import math
import os
from pathlib import Path

from litlab.utils.files import file_type
from litlab.utils.sweep_records import RECORD, checked_record

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


def read_bytes_under(root: Path, relative: str | Path) -> bytes | None:
    path = inside(root, relative)
    try:
        return path.read_bytes() if path is not None else None
    except OSError:
        return None


def read_text(root: Path, relative: str | Path) -> str | None:
    data = read_bytes_under(root, relative)
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
    kind = file_type(path)
    if kind is not None:
        return f"is not a regular file ({kind}; not read)"
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size > MAX_BYTES:
        return f"is over its limit ({size / 2**20:.1f} MiB > {MAX_BYTES >> 20} MiB; not read)"
    return "cannot be read"


def read_json_under(root: Path, relative: str | Path) -> tuple[object, str | None]:
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
    data = read_bytes_under(root, relative)
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


# ------------------------------------------------------------------ jobs
def _job(record) -> dict | None:
    record = checked_record(record)
    if record is None:
        return None
    return {
        **{k: record[k] for k in ("job", "objective", "mode", "metrics", "overrides", "error")},
        "status": "incomplete" if record["status"] == "running" else record["status"],
        "objective_name": record["objective_name"] or "objective",
        "wall_s": record["wall_s"],
    }


def settings_of(overrides: list[str], skip: tuple[str, ...] = ()) -> dict[str, str]:
    """`["trainer.max_epochs=3", "~callbacks.x"]` -> `{"trainer.max_epochs": "3",
    "callbacks.x": "(deleted)"}`, leaving out keys that start with one of `skip`."""
    out = {}
    for o in overrides:
        key, _, value = o.partition("=")
        if not key.lstrip("+~").startswith(skip):
            out[key.lstrip("+~")] = "(deleted)" if key.startswith("~") else value
    return out


def replica_offsets(rows: list[dict], width: float = 0.3) -> dict[str, float]:
    """Where each replica's point sits left or right of its group in a plot of group means
    (the same fold or seed at the same place in every group, so the lines joining a replica
    across groups are level)."""
    names = sorted({str(r["replica"]) for row in rows for r in row["replicas"]})
    if len(names) < 2:
        return dict.fromkeys(names, 0.0)
    return {name: -width / 2 + width * i / (len(names) - 1) for i, name in enumerate(names)}


def common_overrides(jobs: list[dict]) -> set[str]:
    """The overrides every job (record) has."""
    return set.intersection(*(set(j["overrides"]) for j in jobs)) if jobs else set()


def load_jobs(sweep: Path) -> tuple[list[dict], list[str]]:
    """(the jobs, sorted by number; the records that could not be read, as relative paths)."""
    jobs, unreadable = [], []
    for path in walk(sweep, RECORD):
        relative = path.relative_to(sweep)
        data, _ = read_json_under(sweep, relative)
        job = _job(data)
        if job is None:
            unreadable.append(str(relative))
            continue
        job["folder"] = str(relative.parent)
        jobs.append(job)
    jobs.sort(key=lambda j: (j["job"], j["folder"]))
    if jobs:
        common = common_overrides(jobs)
        for j in jobs:
            j["settings"] = settings_of([o for o in j["overrides"] if o not in common])
            j["varying"] = " ".join(o for o in j["overrides"] if o not in common)
    return jobs, unreadable


def best_job(jobs: list[dict]) -> int | None:
    """The number of the best completed job by its finite objective and the sweep's mode."""
    done = [j for j in jobs if j["status"] == "completed" and number(j["objective"]) is not None]
    if not done:
        return None
    sign = -1 if done[0]["mode"].startswith("max") else 1
    return min(done, key=lambda j: (sign * j["objective"], j["job"]))["job"]
