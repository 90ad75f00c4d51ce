"""Sweeps as a user runs them (subprocesses where a kill or two workers are the point, else the
command's real `cli.run` in the worker): the grid summary, and the Optuna search with its
failed and pruned trials, resume after a kill, and two workers sharing one study."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers.runs import ROOT, command_in_process
from helpers.sweeps import FAST, NO_PRUNING, command

from litlab.config.compose import compose

SEARCH = ["hydra.mode=MULTIRUN", "hparams_search=digits_cnn", *FAST]


def study_dir(log_dir: Path) -> Path:
    return log_dir / "train" / "searches" / "digits_cnn"


def load_trials(log_dir: Path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{study_dir(log_dir) / 'optuna.db'}"
    return optuna.load_study(study_name="digits_cnn", storage=storage).get_trials()


def read_summary(sweep_dir: Path) -> list[dict]:
    with open(sweep_dir / "summary.csv") as f:
        return list(csv.DictReader(f))


def test_grid_summary_records_failed_jobs_and_exits_nonzero(tmp_path, capfd, monkeypatch):
    """Jobs that fail while they run (a valid test fraction that leaves the validation split
    empty: found when the data is split; a bad value is refused before the first job). In the
    worker (its real cli.run(main)): the exit code is SystemExit's. Each job's config is
    composed twice: once when every job is checked before the first starts, once for its run
    (Hydra's sweeper would compose each a third time before its launch, only to see that it
    composes: `sweeps.grid.CHECKED`)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    composed = []
    compose_job = ConfigLoaderImpl.load_sweep_config
    monkeypatch.setattr(
        ConfigLoaderImpl,
        "load_sweep_config",
        lambda self, config, overrides: (
            composed.append(overrides) or compose_job(self, config, overrides)
        ),
    )
    overrides = ["hydra.mode=MULTIRUN", "data.test_fraction=0.2,0.999", "seed=1,2", *FAST]
    code, stdout, stderr = command_in_process("train.py", overrides, tmp_path / "logs", capfd)
    assert len(composed) == 2 * 4, composed
    assert code == 1, "a failed job fails the sweep with exit code 1 (docs/sweeps.md)"
    failed = stderr.splitlines()[stderr.splitlines().index("2 failed job(s):") + 1 :]
    for line, (num, seed) in zip(failed, ((2, 1), (3, 2))):  # one line per failed job
        assert re.match(rf"job {num} \(data.test_fraction=0.999 seed={seed}\): UserError: ", line)
    [sweep] = list((tmp_path / "logs" / "train" / "multiruns").glob("*"))
    rows = read_summary(sweep)
    assert [r["status"] for r in rows] == ["completed", "completed", "failed", "failed"]
    assert all("at least one sample" in r["error"] for r in rows[2:])
    assert [r["best"] for r in rows].count("*") == 1
    best = max(rows[:2], key=lambda r: float(r["val/acc"]))
    assert best["best"] == "*" and float(best["objective"]) == float(best["val/acc"])
    assert all(Path(r["run_dir"]).is_dir() and float(r["wall_s"]) >= 0 for r in rows)
    with open(sweep / "summary_stats.csv") as f:
        stats = {s["metric"]: s for s in csv.DictReader(f) if s["group"] == "all jobs"}
    accs = [float(r["test/acc"]) for r in rows[:2]]
    assert int(stats["test/acc"]["n"]) == 2
    assert float(stats["test/acc"]["mean"]) == pytest.approx(sum(accs) / 2)
    assert float(stats["test/acc"]["std"]) == pytest.approx(abs(accs[0] - accs[1]) / 2**0.5)
    half = 12.706205 * float(stats["test/acc"]["std"]) / 2**0.5  # Student's t(0.975, 1 dof)
    high = min(1.0, sum(accs) / 2 + half)  # an accuracy's interval is cut at 1
    assert float(stats["test/acc"]["ci95_high"]) == pytest.approx(high)
    assert stats["test/acc"]["within_noise"] == ""  # one configuration: nothing to compare
    assert json.loads((sweep / "summary_stats.json").read_text())["mode"] == "max"
    assert (sweep / "summary.png").stat().st_size > 0
    assert "mean ± std" in stdout and "| failed |" in (sweep / "summary.md").read_text()
    # report.html, written at exit too (src/report.py; tests/test_report.py)
    assert f"Sweep report: {sweep / 'report.html'}" in stdout
    assert (
        "2 of 4 jobs did not complete (job 2: failed, job 3: failed)"
        in (sweep / "report.html").read_text()
    )


@pytest.mark.slow  # 11 s on 2 cores: .ci/run's second stage (make test stays within 5 minutes)
def test_search_records_failed_and_pruned_trials(tmp_path, capfd):
    """3 trials: one raises (a test fraction of 0.999 leaves no validation sample: found when
    the data is split, not before), one is pruned (lr=1e-7 learns nothing: its epoch-0 val/acc
    is below the completed trial's), the study goes on and writes its best params, history plot
    and summary. The test-fraction space comes from the command line. In the worker (its real
    cli.run(main)): the exit code is SystemExit's."""
    log_dir = tmp_path / "logs"
    enqueued = (
        "hydra.sweeper.enqueue_trials=[{data.test_fraction:0.999},"
        "{model.optimizer.lr:0.003,data.test_fraction:0.2},"
        "{model.optimizer.lr:1.0e-7,data.test_fraction:0.2}]"
    )
    pruner = (
        "hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner,n_startup_trials:1,"
        "n_warmup_steps:0}"
    )
    overrides = [*SEARCH, "hydra.sweeper.n_trials=3", "data.test_fraction=choice(0.2,0.999)"]
    code, _, stderr = command_in_process("train.py", [*overrides, enqueued, pruner], log_dir, capfd)
    assert code == 1, stderr[-2000:]  # the failed trial, after the study's end
    failed = stderr.splitlines()[stderr.splitlines().index("1 failed job(s):") + 1]
    assert failed.startswith("job 0 (") and "at least one sample" in failed, failed
    trials = load_trials(log_dir)
    states = [t.state.name for t in trials]
    assert states == ["FAIL", "COMPLETE", "PRUNED"], states
    assert "at least one sample" in trials[0].user_attrs["error"]
    assert trials[0].params["data.test_fraction"] == 0.999
    out = study_dir(log_dir)
    best = yaml.safe_load((out / "best_params.yaml").read_text())
    completed = [t for t in trials if t.state.name == "COMPLETE"]
    assert best["best_value"] == max(t.value for t in completed)
    assert (out / "optimization_history.png").stat().st_size > 0
    rows = read_summary(out)
    assert [r["status"] for r in rows] == ["failed", "completed", "pruned"]
    assert "at least one sample" in rows[0]["error"]
    # DDP-safe: each trial's params are ordinary overrides of its job (what a child rank re-reads)
    overrides = yaml.safe_load((out / "trial_1" / ".hydra" / "overrides.yaml").read_text())
    for name, value in trials[1].params.items():
        assert f"{name}={value!r}" in overrides or f"{name}={value}" in overrides
    assert not any("LITLAB_OPTUNA_TRIAL" in o for o in overrides)  # the trial id is no override


@pytest.mark.slow  # make test's 5 minutes: the slow stage runs it
def test_search_resumes_after_a_kill_without_rerunning_finished_trials(tmp_path, capfd):
    """The kill is a subprocess's; the resume runs in this process (helpers.here)."""
    from helpers.here import run_here

    log_dir = tmp_path / "logs"
    args = [*SEARCH, NO_PRUNING, "hydra.sweeper.n_trials=2"]
    proc = subprocess.Popen(
        command(log_dir, *args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    second = study_dir(log_dir) / "trial_1" / "sweep_job.json"
    deadline = time.time() + 180
    while not second.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)  # mid-study: trial 0 done, trial 1 running
    proc.wait()
    first = (study_dir(log_dir) / "trial_0" / "sweep_job.json").read_text()
    assert [t.state.name for t in load_trials(log_dir)] == ["COMPLETE", "RUNNING"]

    resumed = run_here(command(log_dir, *args), capfd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    trials = load_trials(log_dir)
    assert (study_dir(log_dir) / "trial_0" / "sweep_job.json").read_text() == first  # not re-run
    assert trials[1].state.name == "FAIL" and trials[1].user_attrs["interrupted"]
    assert trials[2].user_attrs["retry_of"] == 1
    assert [t.state.name for t in trials[2:]] == ["COMPLETE"]
    assert trials[2].params == trials[1].params  # the interrupted trial ran again
    assert sum(t.state.name == "COMPLETE" for t in trials) == 2
    statuses = {r["job"]: r["status"] for r in read_summary(study_dir(log_dir))}
    assert statuses == {"0": "completed", "1": "incomplete", "2": "completed"}


@pytest.mark.slow  # run by .ci/run's second stage (keeps `make test` within 5 minutes)
def test_two_workers_share_one_study_without_duplicates(tmp_path):
    log_dir = tmp_path / "logs"
    cmd = command(log_dir, *SEARCH, NO_PRUNING, "hydra.sweeper.n_trials=3")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    workers = [
        subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    trials = [t for t in load_trials(log_dir) if "surplus" not in t.user_attrs]
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert len({t.user_attrs["run_dir"] for t in trials}) == 3
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 3
    assert len({t.user_attrs["worker"] for t in trials}) == 2, "both workers ran trials"


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in (ROOT / "configs" / "hparams_search").glob("*.yaml"))
)
def test_search_configs_compose_and_search_existing_keys(name, tmp_path):
    """Every searched key exists in the composed config (else every trial would fail)."""
    from omegaconf import OmegaConf

    from litlab.sweeps import optuna_search as search_space

    cfg = compose("train", [f"hparams_search={name}"], output_dir=tmp_path)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True)
    space, _ = search_space.build_space(params, [])
    assert len(space) == len(params)
    for key in space:
        assert OmegaConf.select(cfg, key) is not None, f"{key} is not a key of {name}'s config"
    assert cfg.hydra.sweeper.study_name == name and "optuna_pruning" in cfg.callbacks


def test_interrupted_trials_are_requeued_once(tmp_path):
    """A trial left RUNNING by a dead worker of this host, and one failed by Ctrl-C, are queued
    again exactly once (a second worker scanning the study does not queue them twice)."""
    import socket

    import optuna
    from optuna.trial import TrialState

    from litlab.sweeps.optuna_search import counts, requeue_interrupted

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'db.sqlite'}")
    killed, ctrl_c, raised = study.ask(), study.ask(), study.ask()
    for trial in (killed, ctrl_c, raised):
        trial.suggest_float("x", 0, 1)
    killed.set_user_attr("worker", f"{socket.gethostname()}:{dead.pid}")
    study.tell(ctrl_c, state=TrialState.FAIL)
    raised.set_user_attr("error", "ValueError: boom")
    study.tell(raised, state=TrialState.FAIL)
    assert requeue_interrupted(study) == 2 and requeue_interrupted(study) == 0
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "FAIL", "WAITING", "WAITING"]
    queued = {t.user_attrs["retry_of"]: t.system_attrs["fixed_params"] for t in trials[3:]}
    assert queued == {0: killed.params, 1: ctrl_c.params}  # each runs again with its params
    assert [counts(t) for t in trials[:3]] == [False, False, True]


def test_command_line_sweep_overrides_join_the_search_space():
    """`key=tag(log,interval(a,b))` on the command line becomes a log-uniform dimension; a plain
    `key=value` pins that key for every trial instead of being searched."""
    from litlab.sweeps import optuna_search as search_space

    params = {"model.optimizer.lr": "interval(0.001,0.1)", "model.net.dropout": "choice(0.1,0.5)"}
    space, fixed = search_space.build_space(
        params,
        ["model.net.dropout=tag(log,interval(0.01,0.5))", "model.optimizer.lr=0.01", "seed=3"],
    )
    assert space["model.net.dropout"].log and space["model.net.dropout"].low == 0.01
    assert "model.optimizer.lr" not in space
    assert fixed == ["model.optimizer.lr=0.01", "seed=3"]
