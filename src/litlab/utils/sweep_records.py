"""The record each job of a sweep leaves in its run dir (`sweep_job.json`): what the summary,
a resumed grid sweep and the report read back. A sweep dir may have been copied, edited or
damaged, so a record is data: `checked_record` gives it the shape the summary writes, or None (the
job then counts as one without a record: run again, and from its own last.ckpt if it has one).
Plain Python only: the summary callback is built for every Hydra command."""

import json
import math
import os
import stat

RECORD = "sweep_job.json"
MAX_BYTES = 2**20  # a record is a few KiB: a larger file is not one
# a run's final metrics (runs.summary.save_metrics): written when the run has ended
FINISHED = "metrics.json"
STATUSES = ("completed", "failed", "pruned", "incomplete", "running")


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value, limit: int = 1000) -> str:
    return value[:limit] if isinstance(value, str) else ""


class NotAFile(ValueError):
    """A record's path that is a link, a FIFO, a folder: never read."""


def read_bytes(path, limit: int = MAX_BYTES) -> bytes | None:
    """The file at `path`, or None when there is none or it is over `limit` bytes. Read as
    data: never through a link nor from anything but a regular file (`NotAFile`: a FIFO would
    hang the reader)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a link; ENXIO: a socket
        raise NotAFile(str(path)) from err
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NotAFile(str(path))
        data = f.read(limit + 1)
    return None if len(data) > limit else data


def read_json(path, limit: int = MAX_BYTES):
    """The JSON value of the file at `path` (`read_bytes`), or None when it is not JSON."""
    data = read_bytes(path, limit)
    try:
        return None if data is None else json.loads(data)
    except (ValueError, RecursionError):
        return None


def read_record(path) -> dict | None:
    """The record at `path` (`checked_record`), or None when there is none or it is not a record."""
    return checked_record(read_json(path))


def checked_record(record) -> dict | None:
    """The record with every field the summary writes, each of its type; None when it is not
    a record (not an object, no whole job number, an unknown status, overrides not a list of
    strings). Metrics keep their finite numbers."""
    if not isinstance(record, dict):
        return None
    job, status, overrides = record.get("job"), record.get("status"), record.get("overrides")
    if isinstance(job, bool) or not isinstance(job, int) or job < 0 or status not in STATUSES:
        return None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        return None
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    return {
        "job": job,
        "status": status,
        "overrides": list(overrides),
        "objective_name": _text(record.get("objective_name"), 200) or None,
        "mode": "min" if record.get("mode") == "min" else "max",
        "run_dir": _text(record.get("run_dir")),
        "started": _number(record.get("started")),
        "metrics": {str(k): v for k, v in metrics.items() if _number(v) is not None},
        "objective": _number(record.get("objective")),
        "error": _text(record.get("error"), 300),
        "wall_s": _number(record.get("wall_s")),
    }
