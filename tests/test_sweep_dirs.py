"""A sweep folder is owned and locked (issue 46, litlab.runs.sweep_dir): a sweep writes only into
a new folder or one a litlab sweep made whose entries are its own, never through a link, one
sweep at a time; what it reads back from the folder (its plan, a lock file, job records) is
data, and a command in it is printed only when it is one litlab writes (litlab.utils.commands).
Most checks are in process on folders laid out as a sweep leaves them; subprocesses where the
console line, the exit code or a second process is what is checked."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers.runs import (
    QUIET,
    ROOT,
    TINY_BUDGET,
    command_in_process,
    csv_test_metrics,
    fingerprint,
)

from litlab.errors import UserError
from litlab.runs.sweep_dir import SweepLock, check_owned
from litlab.sweeps import plan
from litlab.utils import commands

JOBS = [["seed=1"], ["seed=2"]]
NEW = "give this sweep a new hydra.sweep.dir (or none: a new timestamped one)"


def _job(folder: Path, num: int, overrides: list[str]) -> None:
    """A job folder as a sweep leaves it: .hydra/overrides.yaml, a record, checkpoints."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    record = {"job": num, "status": "completed", "overrides": overrides, "run_dir": str(folder)}
    (folder / "sweep_job.json").write_text(json.dumps(record))
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (folder / "metrics.json").write_text('{"val/acc": 0.5}')


def _sweep(sweep: Path, jobs=JOBS, **fields) -> Path:
    """A finished litlab sweep of `jobs` (its plan, job folders and summary)."""
    sweep.mkdir(parents=True, exist_ok=True)
    own = commands.command("train", ["seed=1,2", f"hydra.sweep.dir={sweep}"], multirun=True)
    plan.write_plan(sweep, jobs, own, **fields)
    for num, job in enumerate(jobs):
        _job(sweep / str(num), num, job)
    (sweep / "summary.csv").write_text("job,status\n0,completed\n1,completed\n")
    return sweep


def _elsewhere(tmp_path: Path) -> Path:
    """A folder outside the sweep (what a link points at): must stay as it is."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "keep.txt").write_text("the user's")
    return other


def _replace_with_link(path: Path, target: Path) -> None:
    """`path` moved into `target` and a link to it left in its place."""
    os.rename(path, target / path.name)
    path.symlink_to(target / path.name)


def _hostile(case: str, sweep: Path, other: Path) -> str:
    """Lay out one hostile sweep folder; the words its refusal must hold."""
    if case == "user files, no plan":
        (sweep / "0").mkdir(parents=True)
        (sweep / "0" / "notes.txt").write_text("mine")
        (sweep / "summary.csv").write_text("mine")
        return f"hydra.sweep.dir={sweep} holds files that no litlab sweep wrote (0, summary.csv;"
    _sweep(sweep)
    if case == "a job folder replaced by a link":
        _replace_with_link(sweep / "1", other)
        return f"{sweep / '1'} is a symbolic link to {other / '1'}; litlab writes"
    if case in ("checkpoints/", "checkpoints/last.ckpt", "metrics.json", ".hydra"):
        _replace_with_link(sweep / "1" / case.rstrip("/"), other)
        link = sweep / "1" / case.rstrip("/")
        return f"{link} is a symbolic link to {other / link.name}, outside its folder"
    if case == "a job folder that is a file":
        os.rename(sweep / "1", other / "1")
        (sweep / "1").write_text("not a job")
        return f"{sweep / '1'} is a file that no litlab sweep writes"
    if case == "a 0/ of the user's":
        (sweep / "2").mkdir()
        (sweep / "2" / "notes.txt").write_text("mine")
        return f"{sweep / '2'} is not a folder of one of this sweep's jobs"
    if case == "a job of another grid":
        _job(sweep / "2", 2, ["seed=9"])
        return f"{sweep / '2'} is not a folder of one of this sweep's jobs"
    if case == "summary.csv hard-linked":
        (sweep / "summary.csv").unlink()
        os.link(other / "keep.txt", sweep / "summary.csv")
        return f"{sweep / 'summary.csv'} is a hard link to a file elsewhere"
    if case == "summary.csv a FIFO":
        (sweep / "summary.csv").unlink()
        os.mkfifo(sweep / "summary.csv")
        return f"{sweep / 'summary.csv'} is not a regular file"
    if case == "a job record that is a FIFO":
        (sweep / "1" / "sweep_job.json").unlink()
        os.mkfifo(sweep / "1" / "sweep_job.json")
        return f"{sweep / '1' / 'sweep_job.json'} is not a regular file"
    if case == "an overrides.yaml that is a FIFO":
        (sweep / "1" / "sweep_job.json").unlink()
        (sweep / "1" / ".hydra" / "overrides.yaml").unlink()
        os.mkfifo(sweep / "1" / ".hydra" / "overrides.yaml")  # read: it would hang
        return f"{sweep / '1'} is not a folder of one of this sweep's jobs"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "user files, no plan",
        "a job folder replaced by a link",
        "checkpoints/",
        "checkpoints/last.ckpt",
        "metrics.json",
        ".hydra",
        "a job folder that is a file",
        "a 0/ of the user's",
        "a job of another grid",
        "summary.csv hard-linked",
        "summary.csv a FIFO",
        "a job record that is a FIFO",
        "an overrides.yaml that is a FIFO",
    ],
)
def test_a_folder_that_is_not_all_the_sweeps_own_is_refused_untouched(tmp_path, case):
    sweep, other = tmp_path / "logs" / "sweep", _elsewhere(tmp_path)
    words = _hostile(case, sweep, other)
    before = fingerprint(tmp_path)
    with pytest.raises(UserError) as refused:
        check_owned(sweep, plan.GRID, "train")
    line = str(refused.value)
    assert "\n" not in line and words in line, line
    assert fingerprint(tmp_path) == before


def _plan_file(case: str, sweep: Path, other: Path) -> str:
    """A sweep whose plan file is crafted or damaged; the words of its refusal."""
    _sweep(sweep)
    path = sweep / plan.PLAN
    if case == "a link":
        os.rename(path, other / plan.PLAN)
        path.symlink_to(other / plan.PLAN)
        return f"it is a symbolic link to {other / plan.PLAN}"
    path.unlink()
    if case == "a FIFO":
        os.mkfifo(path)
        return "it is not a regular file"
    if case == "huge":
        with open(path, "wb") as f:
            f.truncate(plan.MAX_BYTES + 1)  # sparse: no disk used
        return f"{plan.MAX_BYTES + 1} bytes, over its limit of {plan.MAX_BYTES}"
    if case == "not JSON":
        path.write_bytes(b"\x80\x81 not text")
        return "it is not UTF-8 text"
    if case == "another tool's":
        path.write_text(json.dumps({"jobs": JOBS, "resume": "python src/train.py -m seed=1,2"}))
        return "it does not say made_by: litlab (another tool's plan, or an older litlab's)"
    if case == "jobs of another shape":
        path.write_text(json.dumps({"made_by": "litlab", "kind": "grid", "entry": "train",
                                    "jobs": [["seed=1", 2]], "resume": ""}))  # fmt: skip
        return "its jobs are not lists of overrides"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case", ["a link", "a FIFO", "huge", "not JSON", "another tool's", "jobs of another shape"]
)
def test_a_plan_file_that_is_not_litlabs_is_refused_naming_it(tmp_path, case):
    sweep, other = tmp_path / "logs" / "sweep", _elsewhere(tmp_path)
    words = _plan_file(case, sweep, other)
    before = fingerprint(tmp_path)
    with pytest.raises(UserError) as refused:
        check_owned(sweep, plan.GRID, "train")
    assert str(refused.value) == (
        f"{sweep / plan.PLAN} is not a sweep plan litlab can trust ({words}); a sweep writes "
        f"only into a new folder or one that a litlab sweep made: {NEW}"
    )
    assert fingerprint(tmp_path) == before


@pytest.mark.parametrize(
    "made_as, run_as, words",
    [
        ({"entry": "eval"}, (plan.GRID, "train", None), "holds a grid sweep of src/eval.py"),
        (
            {"kind": plan.SEARCH, "study": "a"},
            (plan.GRID, "train", None),
            "holds an Optuna search (study a) of src/train.py (its sweep_plan.json), not a grid",
        ),
        (
            {"kind": plan.SEARCH, "study": "a"},
            (plan.SEARCH, "train", "b"),
            "not an Optuna search (study b) of src/train.py",
        ),
    ],
)
def test_a_sweep_of_another_kind_is_refused(tmp_path, made_as, run_as, words):
    sweep = _sweep(tmp_path / "sweep", **made_as)
    with pytest.raises(UserError, match=re.escape(words)):
        check_owned(sweep, *run_as)


def test_the_sweep_dir_itself_must_be_a_folder_of_its_own(tmp_path):
    real = _sweep(tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UserError, match=re.escape(f"{tmp_path / 'link'} is a symbolic link to")):
        check_owned(tmp_path / "link", plan.GRID, "train")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file, not a folder"):
        check_owned(tmp_path / "file", plan.GRID, "train")


def test_new_folders_and_the_sweeps_own_are_let_in(tmp_path):
    """Absent, empty, holding only a stale lock: new. A litlab sweep's folder with its jobs, a
    job folder that is still empty, jobs under a subdir with a `/`, a code snapshot: its own."""
    assert check_owned(tmp_path / "absent", plan.GRID, "train") is None
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / ".sweep.lock").write_text("12345 somehost\n")
    assert check_owned(tmp_path / "stale", plan.GRID, "train") is None
    sweep = _sweep(tmp_path / "sweep")
    (sweep / "1" / "checkpoints" / "best.ckpt").symlink_to("last.ckpt")  # inside: fine
    from litlab.utils import code_state as snapshot

    snapshot.take(sweep)  # the code its jobs import, as litlab wrote it
    (sweep / ".summary.csv.123.tmp").write_text("a write cut short")
    assert check_owned(sweep, plan.GRID, "train")["jobs"] == JOBS
    nested = _sweep(tmp_path / "nested", jobs=[])
    plan.write_plan(nested, JOBS, commands.command("train", ["seed=1,2"], multirun=True))
    _job(nested / "seed" / "1", 0, JOBS[0])
    (nested / "seed" / "2").mkdir()  # started, nothing written yet
    (nested / "seed" / "3").mkdir()  # started by a parallel launcher: only its console.log
    (nested / "seed" / "3" / "console.log").write_text("started")
    assert check_owned(nested, plan.GRID, "train") is not None


def _sweep_command(log_dir: Path, sweep: Path, *more: str) -> list[str]:
    return [
        sys.executable,
        "src/train.py",
        "-m",
        f"paths.log_dir={log_dir}",
        *QUIET,
        *TINY_BUDGET,
        "seed=1,2",
        f"hydra.sweep.dir={sweep}",
        *more,
    ]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("case", ["a job folder replaced by a link", "user files, no plan"])
def test_the_issues_sweeps_are_refused_in_one_line_before_any_job(tmp_path, case, capfd):
    """Issue 46 as reported: a finished sweep whose job 1 was replaced by a link elsewhere,
    re-run with its own command; a sweep into a folder with the user's summary.csv and 0/.
    Before: job 1 written through the link; the user's files overwritten, exit 0."""
    log_dir, other = tmp_path / "logs", _elsewhere(tmp_path)
    sweep = log_dir / "train" / "multiruns" / "s"
    jobs = [[f"paths.log_dir={log_dir}", *QUIET, *TINY_BUDGET, f"seed={s}"] for s in (1, 2)]
    if case == "user files, no plan":
        words = _hostile(case, sweep, other)
    else:
        _sweep(sweep, jobs=jobs)
        _replace_with_link(sweep / "1", other)
        words = f"{sweep / '1'} is a symbolic link to {other / '1'}; litlab writes"
    before = fingerprint(tmp_path)
    overrides = [*TINY_BUDGET, "seed=1,2", f"hydra.sweep.dir={sweep}"]  # _sweep_command's
    code, out, err = command_in_process("train.py", overrides, log_dir, capfd, flags=("-m",))
    assert code == 2, err[-3000:]
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: hydra.sweep.dir={sweep}") and words in line, line
    assert line.endswith(NEW)
    assert out == "" and fingerprint(tmp_path) == before


HOLD = """
import sys, time
from litlab.runs.sweep_dir import SweepLock
SweepLock(sys.argv[1], note=sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_sweep_into_a_locked_folder_is_refused_naming_the_running_one(tmp_path):
    """Another process holds the sweep folder (a sweep running in it): a sweep into it stops in
    one line naming that process's PID and command, and writes nothing; once that process is
    dead (-9: no clean-up) its lock is taken over."""
    log_dir = tmp_path / "logs"
    sweep = log_dir / "train" / "multiruns" / "s"
    running = commands.command("train", ["seed=1,2", f"hydra.sweep.dir={sweep}"], multirun=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(sweep), running],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = fingerprint(tmp_path)
        proc = _run(_sweep_command(log_dir, sweep))
        assert proc.returncode == 2, proc.stderr[-3000:]
        [line] = proc.stderr.strip().splitlines()
        assert line == (
            f"error: hydra.sweep.dir={sweep} is in use by another sweep: PID {holder.pid} "
            f"({running}); wait for it to end or stop it, then run this command again (a dead "
            "process's lock is taken over)"
        )
        assert fingerprint(tmp_path) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with SweepLock(sweep) as lock:
        assert lock.holder()[0] == os.getpid()


def test_a_crafted_lock_file_is_data(tmp_path):
    """What a lock file says is shown only when sound (a crafted command or host is left out);
    one held by nobody is taken over whatever it says; a link, a FIFO or a folder in its place
    is refused in one line, never opened through, never blocking."""
    crafted = "4242 evil\x1b[2Jhost\nrm -rf ~ ; python src/train.py -m seed=7\n"
    held = SweepLock(tmp_path / "a").acquire()
    (tmp_path / "a" / ".sweep.lock").write_text(crafted)
    with pytest.raises(UserError) as refused:
        SweepLock(tmp_path / "a").acquire()
    assert "PID 4242 on ?; wait for it" in str(refused.value) and "rm -rf" not in str(refused.value)
    held.release()
    (tmp_path / "a" / ".sweep.lock").write_text(crafted)  # nobody holds it now
    with SweepLock(tmp_path / "a", note="mine") as lock:
        assert lock.holder() == (os.getpid(), socket.gethostname()) and lock.holder_note() == "mine"

    victim = tmp_path / "victim.txt"
    victim.write_text("secret")
    for kind in ("link", "fifo", "folder"):
        lock = tmp_path / kind / ".sweep.lock"
        lock.parent.mkdir()
        {"link": lambda p: p.symlink_to(victim), "fifo": os.mkfifo, "folder": os.mkdir}[kind](lock)
        with pytest.raises(UserError, match=re.escape(f"{lock} is ")):
            SweepLock(lock.parent).acquire()
    assert victim.read_text() == "secret"


def test_the_workers_of_one_study_share_the_lock_and_nothing_else_does(tmp_path):
    first = SweepLock(tmp_path, shared=True).acquire()
    second = SweepLock(tmp_path, shared=True).acquire()  # another worker of the study
    with pytest.raises(UserError, match="is in use by another sweep"):
        SweepLock(tmp_path).acquire()  # a grid sweep
    first.release()
    second.release()
    SweepLock(tmp_path).acquire().release()


@pytest.mark.slow  # two sweeps of tiny jobs at once: ~30 s on 2 busy cores
def test_two_sweeps_started_a_second_apart_train_each_job_once(tmp_path):
    """Issue 46: two sweeps into one folder a second apart both trained the same jobs. Now the
    second stops in one line naming the first, which trains every job once."""
    log_dir = tmp_path / "logs"
    sweep = log_dir / "train" / "multiruns" / "s"
    cmd = _sweep_command(log_dir, sweep, "seed=1,2,3,4")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().startswith("sweep dir: ")  # past its checks, locked
    time.sleep(1)
    second = _run(cmd)  # refused by its first check (~2 s), long before 4 jobs are done
    assert first.poll() is None, "the first sweep ended before the second was checked"
    rest, _ = first.communicate(timeout=300)
    assert first.returncode == 0, rest[-3000:]
    assert second.returncode == 2
    [line] = second.stderr.strip().splitlines()
    assert line.startswith(f"error: hydra.sweep.dir={sweep} is in use by another sweep: PID ")
    assert f"PID {first.pid} (python src/train.py -m " in line
    records = [json.loads((sweep / str(n) / "sweep_job.json").read_text()) for n in range(4)]
    assert [r["status"] for r in records] == ["completed"] * 4
    for num in range(4):  # trained once: one test row, no second start in its run dir
        assert csv_test_metrics(sweep / str(num))
        assert not list((sweep / str(num) / ".hydra").glob("resume-*"))
