"""A grid sweep's plan: every job it will run, kept in its sweep dir so that the same command
with `hydra.sweep.dir=<that dir>` resumes it.

The sweeper (src/hydra_plugins/litlab_grid_sweeper) writes `sweep_plan.json` (each job's
overrides, and the command that resumes the sweep) before the first job starts. A re-run into
that dir keeps what finished and runs only what is missing; it must therefore be the same
sweep: a command whose jobs differ from the jobs on disk (`trainer.max_epochs=3` where they
trained 2 epochs, another grid) would rank unlike jobs together, so it is refused in one line
before anything is written (as a resumed Optuna study is: `study_settings`). Keys that only say
where files go or how much is printed (`study_settings.MACHINE_LOCAL`) may differ.

The plan also tells the summary of a stopped sweep which jobs never started ("not started"),
so that it lists every job, and `failure_lines` says, at the end, what failed in one line each.
"""

import json
import os
import shlex
import sys
from pathlib import Path

from litlab.errors import UserError, one_line
from litlab.sweeps.study_settings import MACHINE_LOCAL, override_settings

PLAN = "sweep_plan.json"
NOT_STARTED = "not started"


def resume_command(config) -> str:
    """`python src/<entry>.py -m <the user's overrides> hydra.sweep.dir=<this sweep's dir>`:
    the command that resumes this sweep, as the user would type it."""
    from omegaconf import OmegaConf

    hydra = config.hydra
    task = [str(o) for o in hydra.overrides.task]
    own = [
        str(o)
        for o in hydra.overrides.hydra
        if str(o).split("=", 1)[0].lstrip("+~") not in ("hydra.sweep.dir", "hydra.mode")
    ]
    sweep_dir = os.path.abspath(str(OmegaConf.select(config, "hydra.sweep.dir")))
    args = [*map(without_password, task + own), f"hydra.sweep.dir={sweep_dir}"]
    return " ".join(["python", f"src/{hydra.job.config_name}.py", "-m", *map(shlex.quote, args)])


def without_password(override: str) -> str:
    """The override with a database URL's password shown as `***`: the resume command is printed
    and kept in the sweep dir, and a password must be in neither (docs/sweeps.md: put it back,
    or give it by PGPASSWORD or ~/.pgpass)."""
    key, sep, value = override.partition("=")
    if not sep or key.lstrip("+~") != "hydra.sweeper.storage" or "://" not in value:
        return override
    from litlab.sweeps.storage import hide_password

    return f"{key}={hide_password(value)}"


def write(sweep_dir: Path, jobs: list[list[str]], command: str) -> None:
    path = Path(sweep_dir) / PLAN
    tmp = path.with_name(f".{PLAN}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"jobs": jobs, "resume": command}, indent=1) + "\n")
    tmp.replace(path)


def load(sweep_dir: Path) -> dict | None:
    try:
        plan = json.loads((Path(sweep_dir) / PLAN).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(plan, dict) and isinstance(plan.get("jobs"), list)
    return plan if ok and all(isinstance(j, list) for j in plan["jobs"]) else None


def _jobs_on_disk(sweep_dir: Path, records: list[dict]) -> tuple[dict[int, list[str]], int | None]:
    """{job number: overrides} of the sweep in `sweep_dir` (its plan, else its job records),
    and how many jobs its plan had (None without a plan)."""
    plan = load(sweep_dir)
    if plan is not None:
        return {i: [str(o) for o in job] for i, job in enumerate(plan["jobs"])}, len(plan["jobs"])
    return {int(r["job"]): [str(o) for o in r.get("overrides", [])] for r in records}, None


def _difference(stored: list[str] | None, current: list[str] | None) -> str | None:
    """`key=<then> then, <now> now` for the first setting that differs, else None."""
    then = override_settings(stored or [], skip=MACHINE_LOCAL)
    now = override_settings(current or [], skip=MACHINE_LOCAL)
    differ = sorted(k for k in then.keys() | now.keys() if then.get(k) != now.get(k))
    if not differ and (stored is None) == (current is None):
        return None
    if not differ:
        return "not in the sweep then" if stored is None else "not in this command"
    key = differ[0]
    return f"{key}={then.get(key, '(not set)')} then, {now.get(key, '(not set)')} now"


def check_resume(sweep_dir: Path, jobs: list[list[str]], records: list[dict]) -> None:
    """One `UserError` unless the jobs of `sweep_dir` are the jobs of this command."""
    stored, count = _jobs_on_disk(sweep_dir, records)
    if not stored:
        return
    changes = []
    if count is not None and count != len(jobs):
        changes.append(f"{count} jobs then, {len(jobs)} now")
    for num in sorted(stored.keys() | set(range(len(jobs)))):
        diff = _difference(stored.get(num), jobs[num] if num < len(jobs) else None)
        if diff is not None:
            changes.append(f"job {num}: {diff}")
            break
    if not changes:
        return
    own = load(sweep_dir) or {}
    again = f"its own command ({own['resume']})" if own.get("resume") else "its own overrides"
    raise UserError(
        f"hydra.sweep.dir={sweep_dir} holds a sweep with other settings ({'; '.join(changes)}): "
        f"its jobs and this command's would not be comparable. Resume it with {again}, or "
        "give this sweep a new hydra.sweep.dir (or none: a new timestamped one)"
    )


def with_not_started(sweep_dir: Path, records: list[dict]) -> list[dict]:
    """`records` and a record for each job of the plan that never started (a stopped or
    fail-fast sweep), in job order."""
    plan = load(sweep_dir)
    if plan is None:
        return records
    seen = {int(r["job"]) for r in records}
    example = records[0] if records else {}
    missing = [
        {
            "job": num,
            "overrides": [str(o) for o in job],
            "objective_name": example.get("objective_name"),
            "mode": example.get("mode", "max"),
            "run_dir": "",
            "status": NOT_STARTED,
            "started": None,
            "metrics": {},
            "objective": None,
            "error": "",
            "wall_s": None,
        }
        for num, job in enumerate(plan["jobs"])
        if num not in seen
    ]
    return sorted(records + missing, key=lambda r: (r["job"], r["run_dir"]))


def varying(records: list[dict], record: dict) -> str:
    """The overrides that tell this job from the sweep's others (all of them if none differ)."""
    common = set.intersection(*(set(r["overrides"]) for r in records)) if records else set()
    own = [o for o in record["overrides"] if o not in common] or record["overrides"]
    return " ".join(own) or "(no overrides)"


def failure_lines(records: list[dict]) -> list[str]:
    """`job N (overrides): error`, one line per failed job."""
    return [
        f"job {r['job']} ({varying(records, r)}): {one_line(r.get('error') or 'failed', limit=300)}"
        for r in records
        if r["status"] == "failed"
    ]


def announce(config) -> None:
    """Where the sweep writes and how to resume it, printed when it starts."""
    from omegaconf import OmegaConf

    where = os.path.abspath(str(OmegaConf.select(config, "hydra.sweep.dir")))
    print(f"sweep dir: {where}\nresume it with: {resume_command(config)}", flush=True)


def end(sweep_dir: Path, records: list[dict], stopped: bool) -> bool:
    """Print one line per failed job and, for a grid sweep that did not complete every job, the
    command that runs what is missing. True when a job or trial failed: the command then exits
    non-zero after its summary, report and best params are written (a pruned trial is not a
    failure)."""
    lines = failure_lines(records)
    if lines:
        print(f"\n{len(lines)} failed job(s):", *lines, sep="\n", file=sys.stderr, flush=True)
    own = load(sweep_dir)
    if own is None:  # a search: its failed trials are listed above; no command runs "the rest"
        return bool(lines)
    done = sum(r["status"] == "completed" for r in records)
    if done < len(records) and own.get("resume"):
        what = "sweep stopped" if stopped else "sweep ended"
        print(
            f"{what} with {done} of {len(records)} jobs completed; run the rest with: "
            f"{own['resume']}",
            file=sys.stderr,
            flush=True,
        )
    return bool(lines)
