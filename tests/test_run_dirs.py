"""Run dirs stay below paths.log_dir, or the command stops in one line before anything is
made (task_name, hydra.run.dir, sweep dirs and subdirs, hydra.output_subdir, paths.output_dir,
the job's log files), and a run dir is held by one process at a time (checkpointing/run_lock)."""

import os
import signal
import subprocess
import sys

import pytest
from helpers.runs import ROOT, run_cli, run_in_process
from helpers.trust import Victims

from litlab.errors import UserError


@pytest.mark.parametrize(
    "override, words",
    [
        ("task_name=../../../escaped", "task_name=../../../escaped must be a plain folder name"),
        ("hydra.run.dir=@elsewhere", "is outside paths.log_dir"),
        ("hydra.output_subdir=../../../../x", "hydra.output_subdir=../../../../x leaves the run"),
    ],
)
def test_run_dir_outside_log_dir_is_refused_before_anything_is_made(
    tmp_path, capfd, override, words
):
    """The API's exception, and the CLI's line from train.py's real `cli.run(main)`, argv and
    all, in this worker (test_bad_inputs runs the pre-Hydra refusals in a new interpreter)."""
    from litlab import train

    logs, elsewhere = tmp_path / "box" / "logs", tmp_path / "elsewhere"
    override = override.replace("@elsewhere", str(elsewhere))
    with pytest.raises(UserError, match=words.replace(".", r"\.")):
        train([override, f"paths.log_dir={logs}"])
    assert sorted(tmp_path.rglob("*")) == [], "a folder was made"
    code, err = run_in_process("train.py", [override], logs, capfd)  # the CLI, before Hydra
    assert code == 2 and err.count("\n") == 1 and words in err, err
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
    from litlab.runs.run_dir import check_location

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


def test_run_dir_lock_names_its_holder_and_a_dead_holder_is_taken_over(tmp_path, capfd):
    """A second resume of a held run dir is refused in one line naming the PID (nothing
    written into the run); once the holder is killed (-9) the lock is taken over. The holder
    is another process (the lock is the OS's); the refused resume runs train.py's real
    `cli.run(main)` in this worker: a new interpreter would only add the imports of torch."""
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
        code, err = run_in_process("train.py", [f"ckpt_path={run}"], tmp_path / "logs", capfd)
        assert code == 2 and err.count("\n") == 1, err
        assert f"in use by PID {holder.pid}" in err and str(run) in err
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
    from litlab.runs.run_dir import check_location

    with pytest.raises(UserError, match=r"^paths is required by this command .*paths=default$"):
        check_location(compose("train", ["~paths"]), multirun=multirun)


def _run_dir(tmp_path, *files: str):
    """A run dir as Hydra leaves it (.hydra/, the log file), plus `files` (relative paths)."""
    run = tmp_path / "logs" / "train" / "runs" / "2026-01-01_00-00-00"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run / "train.log").write_text("")
    for name in files:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"x")
    return run


OVERRIDES = ["paths.log_dir=/logs", "model.optimizer.lr=0.5", "ckpt_path=last"]


def test_bad_input_before_a_checkpoint_removes_the_fresh_run_dir(tmp_path):
    from litlab.runs.run_end import RunEnd

    run = _run_dir(tmp_path)
    end = RunEnd(run, "train", OVERRIDES)
    (run / "provenance.json").write_text("{}")  # written before the error, no checkpoint yet
    end.failed(UserError("model.net.channels=[] is too short"))
    assert not run.exists()


@pytest.mark.parametrize(
    "error, code",
    [
        ("nan", 1),  # NonFiniteLoss: a UserError that exits 1
        ("image", 2),  # an unreadable image mid-run: bad input, exit 2
        ("crash", 1),  # an exception litlab does not know
        ("ctrl_c", 1),
        ("sigterm", 143),  # Lightning's SIGTERMException is a SystemExit
    ],
)
def test_a_run_that_wrote_a_checkpoint_is_kept_marked_failed(tmp_path, error, code):
    """Whatever stops a run once it holds a checkpoint: nothing is removed, failed.json says
    what stopped it, and a one-line error gains the command that resumes the run (this run's
    overrides, its ckpt_path replaced by the run dir); a later finished resume clears it."""
    import json

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from litlab.callbacks.guards import NonFiniteLoss
    from litlab.runs.run_end import FAILED, RunEnd

    errors = {
        "nan": NonFiniteLoss("training loss is nan at global step 30"),
        "image": UserError("cannot read image /data/cat/1.png: gone; fix or remove the file"),
        "crash": RuntimeError("CUDA error: an illegal memory access"),
        "ctrl_c": SystemExit(1),  # what Lightning turns Ctrl-C into
        "sigterm": SIGTERMException(143),
    }
    run = _run_dir(tmp_path)
    end = RunEnd(run, "train", OVERRIDES)
    for name in ("checkpoints/epoch_000.ckpt", "checkpoints/last.ckpt", "csv/metrics.csv"):
        (run / name).parent.mkdir(exist_ok=True)
        (run / name).write_bytes(b"x")
    err = errors[error]
    end.failed(err)
    names = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert "checkpoints/last.ckpt" in names and "checkpoints/epoch_000.ckpt" in names
    record = json.loads((run / FAILED).read_text())
    command = f"python src/train.py paths.log_dir=/logs model.optimizer.lr=0.5 ckpt_path={run}"
    assert record["resume"] == command and record["exit_code"] == code
    if isinstance(err, UserError):
        assert str(err).endswith(f"; resume: {command}") and "\n" not in str(err)
        assert record["error"] == str(err).split("; resume: ")[0]
    assert end.resume_line() == f"resume: {command}"
    RunEnd(run, "train", OVERRIDES).finished()  # the resume that finished
    assert not (run / FAILED).exists() and (run / "checkpoints" / "last.ckpt").is_file()


def test_a_refused_resume_leaves_its_run_as_it_was(tmp_path):
    """Bad input on `ckpt_path=<run dir>` before the resume wrote anything: the run keeps its
    files and gets no failed.json; only the config record Hydra saved for the resume goes. A
    resume that failed (exit 1) without writing is marked failed."""
    from litlab.callbacks.guards import NonFiniteLoss
    from litlab.runs.run_end import FAILED, RunEnd

    run = _run_dir(tmp_path, "checkpoints/last.ckpt", "csv/metrics.csv")
    (run / ".hydra" / "resume-2026-01-02_00-00-00").mkdir()
    before = sorted(p.name for p in run.rglob("*") if "resume-" not in str(p))
    err = UserError("trainer.max_epochs=0 must be >= 1")
    RunEnd(run, "train", OVERRIDES).failed(err)
    assert sorted(p.name for p in run.rglob("*")) == before
    assert str(err) == "trainer.max_epochs=0 must be >= 1"
    RunEnd(run, "train", OVERRIDES).failed(NonFiniteLoss("training loss is inf at global step 3"))
    assert (run / FAILED).is_file()


def test_a_resume_refused_after_its_logger_wrote_keeps_the_run_and_suggests_nothing(tmp_path):
    """Lightning refuses `trainer.limit_train_batches=0.01` only when it meets the data, after
    the CSV logger rewrote hparams.yaml: no checkpoint changed, so the run is as it was, with no
    failed.json and no resume command (it would repeat the refused setting)."""
    from litlab.runs.run_end import FAILED, RunEnd

    run = _run_dir(tmp_path, "checkpoints/last.ckpt", "checkpoints/epoch_001.ckpt")
    end = RunEnd(run, "train", [*OVERRIDES, "trainer.limit_train_batches=0.01"])
    (run / "csv").mkdir()
    (run / "csv" / "hparams.yaml").write_text("lr: 0.5\n")
    err = UserError("Lightning refused a setting: 0.01 * 21 < 1")
    end.failed(err)
    assert not (run / FAILED).exists() and "resume" not in str(err)
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == b"x"


def test_sweep_jobs_and_other_ranks_are_never_removed_nor_told_to_resume(tmp_path, monkeypatch):
    from litlab.runs.run_end import FAILED, RunEnd

    run = _run_dir(tmp_path)
    end = RunEnd(run, "train", OVERRIDES, sweep=True)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    err = UserError("cannot read image x.png")
    end.failed(err)
    assert str(err) == "cannot read image x.png" and (run / FAILED).is_file()
    (run / FAILED).unlink()
    monkeypatch.setenv("RANK", "1")  # a DDP rank > 0: rank 0 decides for the run dir
    RunEnd(run, "train", OVERRIDES).failed(RuntimeError("boom"))
    assert not (run / FAILED).exists()


@pytest.mark.parametrize("written", [True, False])
def test_a_full_disk_says_whether_there_is_anything_to_resume(tmp_path, written):
    import errno

    from litlab.errors import DiskFull
    from litlab.runs.run_end import RunEnd, as_user_error

    run = _run_dir(tmp_path)
    end = RunEnd(run, "train", OVERRIDES)
    if written:
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(run / "x.ckpt"))
        except OSError:
            raise RuntimeError("PytorchStreamWriter failed writing file data/0")  # as torch.save
    except RuntimeError as caught:
        err = as_user_error(caught, str(run))
    assert isinstance(err, DiskFull) and err.exit_code == 1
    end.failed(err)
    if written:
        assert "free space, then resume from the checkpoints written before; resume: " in str(err)
        assert str(err).endswith(f"ckpt_path={run}") and (run / "failed.json").is_file()
    else:
        assert str(err).endswith("free space, then run again (no checkpoint was written)")
        assert not run.exists()


def test_the_first_jobs_paths_leave_the_config_as_it_was_even_when_one_fails_to_resolve():
    """`run_dir._as_job` sets the first job's fields on the config itself: afterwards the
    config is what it was (a field it lacked removed again), also when a key does not resolve,
    and `${hydra:...}` reads what it read before."""
    import copy

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from litlab.runs import run_dir

    cfg = OmegaConf.create(
        {
            "hydra": {"job": {"num": "???", "id": "???"}, "runtime": {}},
            "out": "${hydra.runtime.output_dir}/x",
            "job": "${hydra.job.num}",
            "broken": "${nowhere}",
        }
    )
    before, state = copy.deepcopy(cfg), HydraConfig.instance().cfg
    assert run_dir._as_job(cfg, ["out", "job"], "/runs/a") == ["/runs/a/x", 0]
    assert cfg == before and "output_dir" not in cfg.hydra.runtime
    with pytest.raises(Exception, match="nowhere"):
        run_dir._as_job(cfg, ["out", "broken"], "/runs/a")
    assert cfg == before and HydraConfig.instance().cfg is state
