"""A sweep's jobs, read from the records its jobs leave (`sweep_job.json`, written by
`litlab.sweeps.summary`). The records are data: one that does not have the shape the summary
writes is left out and named on the page; every value shown is a plain one."""

from pathlib import Path

from litlab.report import files
from litlab.utils.sweep_records import RECORD, checked_record


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


def settings_of(overrides: list[str]) -> dict[str, str]:
    """key -> value of each override (`~key`: deleted)."""
    out = {}
    for o in overrides:
        key, _, value = o.partition("=")
        out[key.lstrip("+~")] = "(deleted)" if key.startswith("~") else value
    return out


def load_jobs(sweep: Path) -> tuple[list[dict], list[str]]:
    """(the jobs, sorted by number; the records that could not be read, as relative paths)."""
    jobs, unreadable = [], []
    for path in files.walk(sweep, RECORD):
        relative = path.relative_to(sweep)
        data, _ = files.read_json_under(sweep, relative)
        job = _job(data)
        if job is None:
            unreadable.append(str(relative))
            continue
        job["folder"] = str(relative.parent)
        jobs.append(job)
    jobs.sort(key=lambda j: (j["job"], j["folder"]))
    if jobs:
        common = set.intersection(*(set(j["overrides"]) for j in jobs))
        for j in jobs:
            j["settings"] = settings_of([o for o in j["overrides"] if o not in common])
            j["varying"] = " ".join(o for o in j["overrides"] if o not in common)
    return jobs, unreadable


def best_job(jobs: list[dict]) -> int | None:
    """The number of the best completed job by its objective and the sweep's mode."""
    done = [j for j in jobs if j["status"] == "completed" and j["objective"] is not None]
    if not done:
        return None
    sign = -1 if done[0]["mode"].startswith("max") else 1
    return min(done, key=lambda j: (sign * j["objective"], j["job"]))["job"]
