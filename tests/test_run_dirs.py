"""Run dirs stay below paths.log_dir, or the command stops in one line before anything is
made (task_name, hydra.run.dir, sweep dirs and subdirs, hydra.output_subdir, paths.output_dir,
the job's log files), and a run dir is held by one process at a time (checkpointing/run_lock)."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, run_cli
from test_trust import Victims

from litlab.errors import UserError


@pytest.mark.parametrize(
    "override, words",
    [
        ("task_name=../../../escaped", "task_name=../../../escaped must be a plain folder name"),
        ("hydra.run.dir=@elsewhere", "is outside paths.log_dir"),
        ("hydra.output_subdir=../../../../x", "hydra.output_subdir=../../../../x leaves the run"),
    ],
)
def test_run_dir_outside_log_dir_is_refused_before_anything_is_made(tmp_path, override, words):
    from litlab import train

    logs, elsewhere = tmp_path / "box" / "logs", tmp_path / "elsewhere"
    override = override.replace("@elsewhere", str(elsewhere))
    with pytest.raises(UserError, match=words.replace(".", r"\.")):
        train([override, f"paths.log_dir={logs}"])
    assert sorted(tmp_path.rglob("*")) == [], "a folder was made"
    p = run_cli("train.py", override, log_dir=logs, check=False)  # the CLI, before Hydra
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr
    assert sorted(tmp_path.rglob("*")) == []


@pytest.mark.parametrize(
    "override",
    ["hydra.job_logging.handlers.file.filename=@/evil.log", "paths.output_dir=@/out"],
)
def test_run_files_outside_log_dir_are_refused(tmp_path, override):
    from litlab import train

    logs = tmp_path / "box" / "logs"
    with pytest.raises(UserError, match="is outside paths.log_dir"):
        train([override.replace("@", str(tmp_path)), f"paths.log_dir={logs}"])
    assert sorted(tmp_path.rglob("*")) == []


def test_sweep_dirs_outside_log_dir_are_refused(tmp_path):
    """-m: the sweep dir, and a job's subdir as it resolves for a job, stay below the log dir."""
    from litlab.config.compose import compose
    from litlab.recipes.run_dir import check_location

    logs = tmp_path / "logs"
    for override, words in [
        (f"hydra.sweep.dir={tmp_path / 'out'}", "hydra.sweep.dir=.* is outside paths.log_dir"),
        ("hydra.sweep.subdir=../../../j${hydra.job.num}", "hydra.sweep.subdir=../../../j0 leaves"),
    ]:
        cfg = compose("train", [override, f"paths.log_dir={logs}"])
        with pytest.raises(UserError, match=words):
            check_location(cfg, multirun=True)
    check_location(compose("train", ["hparams_search=digits_cnn"]), multirun=True)  # trial_N


def test_job_dirs_named_after_overrides_stay_in_the_sweep_dir(tmp_path):
    """`hydra.sweep.subdir=${hydra.job.override_dirname}`: Hydra makes each job's dir before
    any job callback runs, so a sweep value with a `..` segment is refused for all jobs at once,
    before anything is made (job 0's dir is inside here, job 1's would not be)."""
    logs = tmp_path / "box" / "logs"
    p = run_cli(
        "train.py",
        "hydra.mode=MULTIRUN",
        "hydra.sweep.subdir=${hydra.job.override_dirname}",
        "+note=a,x/../../../../../../escaped",
        log_dir=logs,
        check=False,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
    assert "outside the sweep dir" in lines[0] and "+note=a,x/../../" in lines[0]
    assert sorted(tmp_path.rglob("*")) == []


HOLD = """
import sys, time
from litlab.checkpointing.run_lock import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_run_dir_lock_names_its_holder_and_a_dead_holder_is_taken_over(tmp_path):
    """A second resume of a held run dir is refused in one line naming the PID (nothing
    written into the run); once the holder is killed (-9) the lock is taken over."""
    from litlab.checkpointing.run_lock import RunLock

    run = tmp_path / "logs" / "train" / "runs" / "2020-01-01_00-00-00"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"refused before it is read")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sorted(p.name for p in run.rglob("*"))
        p = run_cli("train.py", f"ckpt_path={run}", log_dir=tmp_path / "logs", check=False)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert f"in use by PID {holder.pid}" in p.stderr and str(run) in p.stderr
        assert sorted(p.name for p in run.rglob("*")) == before, "the refused run wrote"
        with pytest.raises(UserError, match=f"PID {holder.pid}"):
            RunLock(run).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunLock(run) as lock:  # the dead process's lock
        assert lock.holder()[0] == os.getpid()


def test_lock_file_is_never_opened_through_a_link(tmp_path):
    """A run dir from elsewhere whose lock is a symlink: refused, its target left as it was."""
    from litlab.checkpointing.run_lock import RunLock

    victims = Victims(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".run.lock").symlink_to(victims.file)
    with pytest.raises(UserError, match="is a symbolic link"):
        RunLock(tmp_path / "run").acquire()
    assert victims.untouched()


@pytest.mark.parametrize("multirun", [False, True])
def test_deleted_paths_group_is_named_before_any_dir_is_made(multirun):
    """`~paths` (issue 34): the run dir's location cannot be checked without paths.log_dir:
    one line naming the group, not an interpolation error."""
    from litlab.config.compose import compose
    from litlab.recipes.run_dir import check_location

    with pytest.raises(UserError, match=r"^paths is required by this command .*paths=default$"):
        check_location(compose("train", ["~paths"]), multirun=multirun)
