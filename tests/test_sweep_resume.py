"""Grid sweeps that resume (issue #36): the command printed when a sweep starts (and again when
it stops) runs only what is missing; a resume with other settings is refused in one line;
`fail_fast` stops at the first failed job; every sweep with failures ends with one line per
failed job and exit code 1. Run as a user runs them: subprocesses where a signal, an exit or
the console is checked, else the command's real `cli.run` in this process."""

import csv
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.here import run_here
from helpers.runs import (
    QUIET,
    ROOT,
    TINY_BUDGET,
    command_in_process,
    csv_test_metrics,
    fingerprint,
)

from litlab.errors import UserError
from litlab.sweeps import plan
from litlab.utils import commands

FAST = TINY_BUDGET
# stays on the command line of every run (the resume repeats it); FAULT in the environment
# of the first run only makes it strike (tests/faults.py)
FAULT = "+callbacks.fault._target_=faults.EnvFault"


def _run(args: list[str], env=None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT / "tests")}
    return subprocess.run(
        args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**full_env, **(env or {})},
    )


def _train(log_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "src/train.py", f"paths.log_dir={log_dir}", *QUIET, *FAST, *overrides]


def _sweep(log_dir: Path, *overrides: str) -> list[str]:
    python, script, *rest = _train(log_dir, *overrides)
    return [python, script, "-m", *rest]


def _printed(command: str) -> list[str]:
    """A printed `python src/train.py ...` command, run as printed (this interpreter)."""
    words = shlex.split(command)
    assert words[0] == "python"
    return [sys.executable, *words[1:]]


def _summary(sweep: Path) -> list[dict]:
    with open(sweep / "summary.csv") as f:
        return list(csv.DictReader(f))


def _rows(metrics_csv: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(epoch, step, the columns it filled) of each row of a metrics.csv."""
    with open(metrics_csv) as f:
        rows = list(csv.DictReader(f))
    return [(r["epoch"], r["step"], tuple(sorted(k for k, v in r.items() if v))) for r in rows]


@pytest.mark.slow  # three sweeps and one run of tiny jobs: ~2 minutes on 2 busy cores
def test_stopped_sweep_resumes_as_printed_and_trains_only_what_is_missing(tmp_path, capfd):
    """The stop and the resume are subprocesses (a signal; Lightning's notice kept off the
    console); the run without a stop and the resume that finds nothing to do run in this
    process."""
    log_dir = tmp_path / "logs"
    first = _run(
        _sweep(log_dir, "seed=1,2", "model.optimizer.lr=0.01,0.02", FAULT),
        env={"FAULT": "sigterm@train:4", "FAULT_JOB": "1"},  # mid-epoch 2 of the second job
    )
    assert first.returncode == 143, first.stderr[-3000:]
    [sweep] = (log_dir / "train" / "multiruns").iterdir()
    started = re.search(r"^resume it with: (.+)$", first.stdout, re.MULTILINE).group(1)
    assert f"hydra.sweep.dir={sweep}" in started
    assert [r["status"] for r in _summary(sweep)] == [
        "completed",
        "incomplete",
        "not started",
        "not started",
    ]
    stopped = re.search(
        r"^sweep stopped with 1 of 4 jobs completed; run the rest with: (.+)$",
        first.stderr,
        re.MULTILINE,
    )
    assert stopped and stopped.group(1) == started
    assert (sweep / "1" / "checkpoints" / "last.ckpt").is_file()
    job0 = fingerprint(sweep / "0")

    resumed = _run(_printed(started))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 of 4 jobs completed before and are kept (jobs 0); running 3" in resumed.stdout
    assert f"resuming {sweep / '1'} from last.ckpt" in resumed.stdout
    # Lightning's notice of the resumed job's own checkpoints/: in its train.log only
    assert "exists and is not empty" not in resumed.stdout + resumed.stderr
    assert "exists and is not empty" in (sweep / "1" / "train.log").read_text()
    assert fingerprint(sweep / "0") == job0, "the completed job was not touched"
    rows = _summary(sweep)
    assert [r["status"] for r in rows] == ["completed"] * 4
    assert [r["run_dir"] for r in rows] == [str(sweep / str(i)) for i in range(4)]
    assert (sweep / "1" / ".hydra" / "config.yaml").is_file()  # its first .hydra/ is kept
    assert list((sweep / "1" / ".hydra").glob("resume-*/config.yaml"))

    # the resumed job ends as the same job run without a stop
    alone = run_here(_train(log_dir, "seed=1", "model.optimizer.lr=0.02", FAULT), capfd)
    assert alone.returncode == 0, alone.stderr[-3000:]
    [single] = (log_dir / "train" / "runs").iterdir()
    assert csv_test_metrics(sweep / "1") == csv_test_metrics(single)
    # its metrics.csv goes on where it stopped: the rows of the run without a stop, none twice
    assert _rows(sweep / "1" / "csv" / "metrics.csv") == _rows(single / "csv" / "metrics.csv")

    every_job = {i: fingerprint(sweep / str(i)) for i in range(4)}
    again = run_here(_printed(started), capfd)  # all completed: nothing runs or is written
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 of 4 jobs completed before and are kept" in again.stdout
    assert {i: fingerprint(sweep / str(i)) for i in range(4)} == every_job


@pytest.mark.slow  # two sweeps of tiny jobs: ~2 minutes on 2 busy cores
def test_fail_fast_stops_at_the_first_failed_job_which_the_resume_runs_again(tmp_path, capfd):
    """The first job crashes in its second epoch (an exception litlab does not know): with
    fail_fast the second job never starts; the sweep names the failure in one line, exits 1 and
    prints the command that runs the rest, which runs the failed job again from its last.ckpt
    (written at the end of its first epoch) and then the second job."""
    log_dir = tmp_path / "logs"
    proc = _run(
        _sweep(log_dir, "seed=1,2", "hydra.callbacks.sweep_summary.fail_fast=true", FAULT),
        env={"FAULT": "raise@train:4", "FAULT_JOB": "0"},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    [sweep] = (log_dir / "train" / "multiruns").iterdir()
    assert [r["status"] for r in _summary(sweep)] == ["failed", "not started"]
    assert not (sweep / "1").exists()
    lines = proc.stderr.splitlines()
    at = lines.index("1 failed job(s):")
    assert lines[at + 1] == (
        "job 0 (seed=1): RuntimeError: something litlab does not know went wrong (tests/faults.py)"
    )
    rest = re.fullmatch(
        r"sweep ended with 0 of 2 jobs completed; run the rest with: (.+)", lines[at + 2]
    )
    assert rest and "hydra.callbacks.sweep_summary.fail_fast=true" in rest.group(1)

    again = run_here(_printed(rest.group(1)), capfd)  # a one-off crash: FAULT is not set now
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming {sweep / '0'} from last.ckpt" in again.stdout
    assert [r["status"] for r in _summary(sweep)] == ["completed", "completed"]
    assert "failed job" not in again.stderr


CRAFTED = "rm -rf ~ ; python src/train.py -m seed=7"  # issue 46: echoed as advice before


@pytest.mark.parametrize("stored", ["own", CRAFTED])
def test_resume_with_other_settings_is_refused_before_anything_is_written(tmp_path, stored, capfd):
    """The sweep dir of a 2-job sweep (its plan, as the run dir guard writes it; no job ran) and
    a command with another budget: one line, exit 2, nothing written. The line repeats the
    sweep's own command only when it is one litlab writes (with the sweep dir where it is
    now); a crafted one is never echoed: the plan file is named as not trustworthy."""
    log_dir = tmp_path / "logs"
    sweep = log_dir / "train" / "multiruns" / "mine"
    sweep.mkdir(parents=True)
    jobs = [[f"paths.log_dir={log_dir}", *QUIET, *FAST, f"seed={s}"] for s in (1, 2)]
    own = commands.command("train", ["seed=1,2", "hydra.sweep.dir=/where/it/was"], multirun=True)
    plan.write_plan(sweep, jobs, own if stored == "own" else stored)
    before = fingerprint(log_dir)
    overrides = [*FAST, "seed=1,2", "trainer.max_epochs=3", f"hydra.sweep.dir={sweep}"]
    code, _, err = command_in_process("train.py", overrides, log_dir, capfd, flags=("-m",))
    assert code == 2, err
    [line] = err.strip().splitlines()
    assert fingerprint(log_dir) == before
    assert line.startswith(
        f"error: hydra.sweep.dir={sweep} holds a sweep with other settings (job 0: "
        "trainer.max_epochs=2 then, 3 now): its jobs and this command's would not be comparable"
    )
    if stored == "own":
        assert f"its own command (python src/train.py -m seed=1,2 hydra.sweep.dir={sweep})" in line
    else:
        assert line.endswith(
            f", and its plan {sweep / plan.PLAN} is not trustworthy (its command holds shell "
            "syntax, not only quoted words), so its command is not repeated here; give this "
            "sweep a new hydra.sweep.dir (or none: a new timestamped one)"
        )
        assert "rm -rf" not in line


@pytest.mark.parametrize(
    "now, change",
    [
        (["seed=1", "seed=2", "seed=3"], "2 jobs then, 3 now"),
        (["seed=1", "seed=5"], "job 1: seed=2 then, 5 now"),
        (["seed=1 +model.net.dropout=0.1", "seed=2"], "job 0: model.net.dropout=(not set) then"),
        (
            ["seed=1 ~callbacks.early_stopping", "seed=2"],
            "callbacks.early_stopping=(not set) then, (deleted) now",
        ),
    ],
)
def test_other_grids_are_refused_and_machine_local_keys_may_differ(tmp_path, now, change):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    own = commands.command("train", ["seed=1,2"], multirun=True)
    plan.write_plan(sweep, [["seed=1", "paths.log_dir=/a"], ["seed=2", "paths.log_dir=/a"]], own)
    jobs = [job.split() + ["paths.log_dir=/b", "callbacks.rich_progress_bar=null"] for job in now]
    with pytest.raises(UserError, match=re.escape(change)):
        plan.check_resume(sweep, jobs, [])
    same = [["seed=1", "paths.log_dir=/b", "extras.print_config=false"], ["seed=2"]]
    plan.check_resume(sweep, same, [])  # where files go and what is printed may differ


def test_sigterm_between_jobs_lets_the_job_finish_then_stops_the_sweep():
    """Outside a job's training (Hydra composing the next job, a job's data setup) Python's
    default SIGTERM would end the sweep at once, with no summary and no resume line: the grid
    sweeper notes it instead and stops after the job (exit 143); its handler goes afterwards."""
    import signal

    from litlab.sweeps.grid import _StopBetweenJobs

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("this test process has its own SIGTERM handler")
    with _StopBetweenJobs() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize(
    "record",
    [
        [],
        "completed",
        {"job": "0", "status": "completed", "overrides": []},
        {"job": True, "status": "completed", "overrides": []},
        {"job": -1, "status": "completed", "overrides": []},
        {"job": 0, "status": "done", "overrides": []},
        {"job": 0, "status": "completed", "overrides": "seed=1"},
        {"job": 0, "status": "completed", "overrides": [1]},
    ],
)
def test_a_damaged_job_record_is_no_record(record):
    """sweep_job.json is data (a copied or edited sweep dir): one without the summary's shape
    counts as no record, for the summary, a resume and the report alike."""
    from litlab.utils.sweep_records import checked_record

    assert checked_record(record) is None


def test_a_record_keeps_only_values_of_its_types():
    from litlab.utils.sweep_records import checked_record

    record = checked_record(
        {
            "job": 2,
            "status": "completed",
            "overrides": ["seed=1"],
            "objective": float("nan"),
            "metrics": {"test/acc": 0.9, "test/f1": "0.8", "val/acc": float("inf")},
            "error": "x" * 5000,
            "mode": "sideways",
            "run_dir": ["/etc"],
        }
    )
    assert record["objective"] is None and record["metrics"] == {"test/acc": 0.9}
    assert len(record["error"]) == 300 and record["mode"] == "max" and record["run_dir"] == ""


def test_a_finished_job_whose_record_is_damaged_is_kept_not_trained_over(tmp_path):
    """A job whose run dir says it finished (metrics.json) keeps its checkpoints: its record is
    written again from its metrics and the resumed sweep does not launch it; a job that did not
    finish runs again, told to continue its own last.ckpt (resume.swept_checkpoint)."""
    import json

    from omegaconf import OmegaConf

    from litlab.sweeps import grid

    sweep = tmp_path / "sweep"
    for num in (0, 1):
        (sweep / str(num)).mkdir(parents=True)
        (sweep / str(num) / "sweep_job.json").write_text("[]")  # damaged
    (sweep / "0" / "metrics.json").write_text(json.dumps({"val/acc": 0.75, "test/acc": 0.5}))
    config = OmegaConf.create({"optimized_metric": "val/acc", "hydra": {"output_subdir": ".hydra"}})
    todo, kept = grid.pending(config, sweep, [["seed=1"], ["seed=2"]])
    assert kept == [0] and [num for num, _ in todo] == [1]
    assert f"++hydra.job.env_set.{grid.SWEEP_RESUME}=1" in todo[0][1]
    record = json.loads((sweep / "0" / "sweep_job.json").read_text())
    assert (record["status"], record["objective"], record["overrides"]) == (
        "completed",
        0.75,
        ["seed=1"],
    )


def test_a_finished_job_is_found_under_another_sweep_subdir(tmp_path):
    """`hydra.sweep.subdir=${seed}`: job 1 (seed=0) ran in folder `0`, job 0 (seed=1) in folder
    `1`. A damaged record is rebuilt from the folder whose .hydra/overrides.yaml is the job's,
    never from the folder named like the job's number when that folder is another job's."""
    import json

    import yaml
    from omegaconf import OmegaConf

    from litlab.sweeps import grid

    sweep = tmp_path / "sweep"
    for folder, seed in (("0", 0), ("1", 1)):
        (sweep / folder / ".hydra").mkdir(parents=True)
        (sweep / folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}"]))
        (sweep / folder / "sweep_job.json").write_text("[]")  # damaged
    (sweep / "0" / "metrics.json").write_text(json.dumps({"val/acc": 0.75}))  # seed=0 finished
    config = OmegaConf.create({"optimized_metric": "val/acc", "hydra": {"output_subdir": ".hydra"}})
    todo, kept = grid.pending(config, sweep, [["seed=1"], ["seed=0"]])
    assert kept == [1] and [num for num, _ in todo] == [0]
    record = json.loads((sweep / "0" / "sweep_job.json").read_text())
    assert (record["job"], record["overrides"], record["run_dir"]) == (
        1,
        ["seed=0"],
        str(sweep / "0"),
    )
    assert json.loads((sweep / "1" / "sweep_job.json").read_text()) == []  # not another job's


def test_a_moved_sweeps_summary_names_its_run_dirs_where_they_are_now(tmp_path):
    """Issue 46: a sweep moved elsewhere, then resumed there, kept the old run dirs of its kept
    jobs in summary.csv. Each job's run dir is where its record is now."""
    import json

    from litlab.sweeps.summary import load_records, write_summary

    old, new = tmp_path / "old" / "sweep", tmp_path / "new" / "sweep"
    for num in (0, 1):
        (old / str(num)).mkdir(parents=True)
        record = {"job": num, "status": "completed", "overrides": [f"seed={num}"]}
        record |= {"run_dir": str(old / str(num)), "objective": 0.5, "metrics": {"val/acc": 0.5}}
        (old / str(num) / "sweep_job.json").write_text(json.dumps(record))
    new.parent.mkdir()
    os.rename(old, new)
    write_summary(new, load_records(new), plot=False)
    assert [r["run_dir"] for r in _summary(new)] == [str(new / "0"), str(new / "1")]
