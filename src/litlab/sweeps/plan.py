"""A grid sweep's plan: every job it will run, kept in its sweep dir so that the same command
with `hydra.sweep.dir=<that dir>` resumes it.

The run dir guard (`litlab.runs.sweep_dir`) writes `sweep_plan.json` (who made it, the entry
point and kind of sweep, each job's overrides, the command that resumes it) once the folder is
the sweep's, before the first job starts; `read_plan` reads it back as data. A re-run into
that dir keeps what finished and runs only what is missing; it must therefore be the same
sweep: a command whose jobs differ from the jobs on disk (`trainer.max_epochs=3` where they
trained 2 epochs, another grid) would rank unlike jobs together, so it is refused in one line
before anything is written (as a resumed Optuna study is: `optuna_search.check_study`). Keys
that only say where files go or how much is printed (`MACHINE_LOCAL` below) may differ.

The plan also tells the summary of a stopped sweep which jobs never started ("not started"),
so that it lists every job, and `failure_lines` says, at the end, what failed in one line each."""

import json
import os
import re
import stat
import sys
import uuid
from pathlib import Path

from omegaconf import OmegaConf

from litlab.errors import UserError, one_line
from litlab.report import write_atomically
from litlab.report.files import common_overrides, settings_of
from litlab.utils import commands

PLAN = "sweep_plan.json"
NOT_STARTED = "not started"
MADE_BY = "litlab"  # the plan's `made_by`: a file of another tool is no plan of litlab's
GRID, SEARCH, OTHER = "grid", "search", "sweep"  # its `kind`: whose jobs the folder holds
MAX_BYTES = 64 * 2**20  # a grid of 100 000 jobs of long overrides stays below it
SWEEP_DIR = "hydra.sweep.dir"
NEW_FOLDER = "give this sweep a new hydra.sweep.dir (or none: a new timestamped one)"


MACHINE_LOCAL = (
    *("paths.", "hydra.", "extras.", "logger", "threads", "ddp_join_timeout"),
    *("callbacks.rich_progress_bar", "callbacks.model_summary"),
)


def setting_changes(then: dict, now: dict) -> list[str]:
    """`key=<then> then, <now> now` for each setting that differs, by key. `then` is read from
    a file (a study's attributes, a plan): its keys and values are shown escaped, so a stored
    newline or control character is visible text in the one-line refusal, not a line of its own."""

    def shown(value) -> str:
        return str(value).encode("unicode_escape").decode("ascii")

    differ = sorted(k for k in then.keys() | now.keys() if then.get(k) != now.get(k))
    return [
        f"{shown(k)}={shown(then.get(k, '(not set)'))} then, {shown(now.get(k, '(not set)'))} now"
        for k in differ
    ]


def hide_password(url: str) -> str:
    """The URL with its password as `***`. Plain text, not a URL parser: a password holding an
    unencoded `@` or `/` (not a valid URL, so any parser splits it wrongly and shows its rest)
    is hidden whole, up to the last `@` before the query."""
    head, sep, query = url.partition("?")
    scheme, colon_slashes, rest = head.partition("://")
    if not colon_slashes or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user, has_password, _ = credentials.partition(":")
    return f"{scheme}://{user}{':***' if has_password else ''}@{host}{sep}{query}"


def sweep_resume_command(config) -> str:
    """`python src/<entry>.py -m <the user's overrides> hydra.sweep.dir=<this sweep's dir>`:
    the command that resumes this sweep, as the user would type it (quoted for the shell)."""
    hydra = config.hydra
    task = [str(o) for o in hydra.overrides.task]
    own = [
        str(o)
        for o in hydra.overrides.hydra
        if str(o).split("=", 1)[0].lstrip("+~") not in (SWEEP_DIR, "hydra.mode")
    ]
    sweep_dir = os.path.abspath(str(OmegaConf.select(config, SWEEP_DIR)))
    args = [*map(without_password, task + own), f"{SWEEP_DIR}={sweep_dir}"]
    return commands.command(str(hydra.job.config_name), args, multirun=True)


def without_password(override: str) -> str:
    """The override with a database URL's password shown as `***`: the resume command is printed
    and kept in the sweep dir, and a password must be in neither (docs/sweeps.md: put it back,
    or give it by PGPASSWORD or ~/.pgpass)."""
    key, sep, value = override.partition("=")
    if not sep or key.lstrip("+~") != "hydra.sweeper.storage" or "://" not in value:
        return override
    return f"{key}={hide_password(value)}"


def write_plan(
    sweep_dir: Path,
    jobs: list[list[str]] | None,
    command: str,
    entry: str = "train",
    kind: str = GRID,
    study: str | None = None,
) -> None:
    """The plan that marks `sweep_dir` as this sweep's (`runs.sweep_dir`): who made it, the
    entry point and kind of sweep, a grid's jobs, a search's study, the resume command."""
    plan = {"made_by": MADE_BY, "kind": kind, "entry": entry, "jobs": jobs, "resume": command}
    plan["id"] = _sweep_id(sweep_dir)
    if study is not None:
        plan["study"] = study
    write_atomically(Path(sweep_dir) / PLAN, json.dumps(plan, indent=1) + "\n")


def _sweep_id(sweep_dir: Path) -> str:
    """The sweep's id: kept from its plan (a resume), else new. Its study in its own optuna.db
    records it (`sweeps.optuna_search`): a database copied from another sweep is told apart."""
    try:
        old = (read_plan(sweep_dir) or {}).get("id")
    except UserError:
        old = None
    return old if isinstance(old, str) and re.fullmatch(r"[0-9a-f]{32}", old) else uuid.uuid4().hex


def _untrusted(path: Path, why: str) -> UserError:
    return UserError(
        f"{path} is not a sweep plan litlab can trust ({why}); a sweep writes only into a new "
        f"folder or one that a litlab sweep made: {NEW_FOLDER}"
    )


def _text(path: Path) -> str | None:
    """The plan file's text, read as data: never through a link nor from anything but a
    regular file, at most MAX_BYTES; None when there is none."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise _untrusted(path, f"it is a symbolic link to {os.readlink(path)}")
    if not stat.S_ISREG(st.st_mode):
        raise _untrusted(path, "it is not a regular file")
    if st.st_size > MAX_BYTES:
        raise _untrusted(path, f"{st.st_size} bytes, over its limit of {MAX_BYTES}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise _untrusted(path, f"it cannot be read: {one_line(err)}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _untrusted(path, "it is not UTF-8 text") from None


def _shape(plan) -> str | None:
    """What is wrong with a plan's fields, or None."""
    if not isinstance(plan, dict):
        return "not a JSON object"
    if plan.get("made_by") != MADE_BY:
        return "it does not say made_by: litlab (another tool's plan, or an older litlab's)"
    if plan.get("kind") not in (GRID, SEARCH, OTHER):
        return f"kind is not one of {GRID}, {SEARCH}, {OTHER}"
    if plan.get("entry") not in commands.ENTRY_POINTS:
        return f"entry is not one of {', '.join(commands.ENTRY_POINTS)}"
    jobs = plan.get("jobs")
    if plan["kind"] == GRID and not (
        isinstance(jobs, list)
        and all(isinstance(j, list) and all(isinstance(o, str) for o in j) for j in jobs)
    ):
        return "its jobs are not lists of overrides"
    if plan["kind"] == SEARCH and not isinstance(plan.get("study"), str):
        return "a search without its study name"
    if not isinstance(plan.get("resume"), str):
        return "no resume command"
    return None


def read_plan(sweep_dir: Path) -> dict | None:
    """The plan of `sweep_dir` (None when there is none), or one `UserError` naming the file
    when it is not a plan litlab wrote: a link, a FIFO, over MAX_BYTES, not JSON, or fields
    of another shape."""
    path = Path(sweep_dir) / PLAN
    text = _text(path)
    if text is None:
        return None
    try:
        plan = json.loads(text)
    except (ValueError, RecursionError):  # a crafted deep nesting too
        raise _untrusted(path, "it is not JSON") from None
    why = _shape(plan)
    if why is not None:
        raise _untrusted(path, why)
    return plan


def load_plan(sweep_dir: Path) -> dict | None:
    """The plan of a grid sweep in `sweep_dir`, or None (none, not trusted, or a search's):
    what the summary reads once the sweep was let into its folder (`runs.sweep_dir`)."""
    try:
        plan = read_plan(sweep_dir)
    except UserError:
        return None
    return plan if plan is not None and plan["kind"] == GRID else None


def stored_resume(sweep_dir: Path, plan: dict) -> str:
    """The plan's resume command, to print: only when it is a command litlab writes
    (`commands.stored`; else `commands.Untrusted`), with `hydra.sweep.dir` where the sweep is
    now (a moved sweep)."""
    words = commands.stored(plan.get("resume"), entry=plan.get("entry"), multirun=True)
    return commands.with_override(words, SWEEP_DIR, os.path.abspath(sweep_dir))


def _jobs_on_disk(sweep_dir: Path, records: list[dict]) -> tuple[dict[int, list[str]], int | None]:
    """{job number: overrides} of the sweep in `sweep_dir` (its plan, else its job records),
    and how many jobs its plan had (None without a plan)."""
    plan = load_plan(sweep_dir)
    if plan is not None:
        return {i: [str(o) for o in job] for i, job in enumerate(plan["jobs"])}, len(plan["jobs"])
    return {int(r["job"]): [str(o) for o in r.get("overrides", [])] for r in records}, None


def _difference(stored: list[str] | None, current: list[str] | None) -> str | None:
    """`key=<then> then, <now> now` for the first setting that differs, else None."""
    then = settings_of(stored or [], skip=MACHINE_LOCAL)
    changes = setting_changes(then, settings_of(current or [], skip=MACHINE_LOCAL))
    if changes or (stored is None) == (current is None):
        return changes[0] if changes else None
    return "not in the sweep then" if stored is None else "not in this command"


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
    head = (
        f"hydra.sweep.dir={sweep_dir} holds a sweep with other settings ({'; '.join(changes)}): "
        f"its jobs and this command's would not be comparable"
    )
    own = load_plan(sweep_dir)
    try:
        again = f"its own command ({stored_resume(sweep_dir, own)})" if own else None
    except commands.Untrusted as why:  # never echoed: crafted text is no advice
        raise UserError(
            f"{head}, and its plan {Path(sweep_dir) / PLAN} is not trustworthy ({why}), so its "
            f"command is not repeated here; {NEW_FOLDER}"
        ) from None
    raise UserError(f"{head}. Resume it with {again or 'its own overrides'}, or {NEW_FOLDER}")


def with_not_started(sweep_dir: Path, records: list[dict]) -> list[dict]:
    """`records` and a record for each job of the plan that never started (a stopped or
    fail-fast sweep), in job order."""
    plan = load_plan(sweep_dir)
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
    common = common_overrides(records)
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
    where = os.path.abspath(str(OmegaConf.select(config, "hydra.sweep.dir")))
    print(f"sweep dir: {where}\nresume it with: {sweep_resume_command(config)}", flush=True)


def end(sweep_dir: Path, records: list[dict], stopped: bool, config) -> bool:
    """Print one line per failed job and, for a grid sweep that did not complete every job,
    this sweep's own command (`sweep_resume_command`, made again, not read back), which runs
    what is missing. True when a job or trial failed: the command then exits non-zero after its
    summary, report and best params are written (a pruned trial is not a failure)."""
    lines = failure_lines(records)
    if lines:
        print(f"\n{len(lines)} failed job(s):", *lines, sep="\n", file=sys.stderr, flush=True)
    if load_plan(sweep_dir) is None:  # a search: its failed trials are listed above, no "rest"
        return bool(lines)
    done = sum(r["status"] == "completed" for r in records)
    if done < len(records):
        what = "sweep stopped" if stopped else "sweep ended"
        print(
            f"{what} with {done} of {len(records)} jobs completed; run the rest with: "
            f"{sweep_resume_command(config)}",
            file=sys.stderr,
            flush=True,
        )
    return bool(lines)
