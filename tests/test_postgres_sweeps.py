"""An Optuna study on a real PostgreSQL server, as several machines share one: a server started
here (the `pgserver` package: PostgreSQL binaries in a wheel, no root, no Docker, a Unix
socket only), workers as separate processes with their own log dirs (their own machines), one
study. SQLite only serves the processes of one machine (docs/sweeps.md)."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers.runs import ROOT
from helpers.sweeps import FAST, NO_PRUNING, command

pgserver = pytest.importorskip("pgserver", reason="pgserver is in requirements.txt")
SEARCH = ["hydra.mode=MULTIRUN", "hparams_search=digits_cnn", *FAST]


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """A PostgreSQL server for this module: its URL (postgresql://, psycopg), a fresh database
    per test (`database(name)`)."""
    import sqlalchemy

    # a short path: the Unix socket's path must stay under ~100 characters
    data = Path(os.environ.get("TMPDIR", "/tmp")) / f"litlab-pg-{os.getpid()}"
    server = pgserver.get_server(str(data), cleanup_mode="delete")
    admin = sqlalchemy.create_engine(server.get_uri(), isolation_level="AUTOCOMMIT")

    def database(name: str) -> str:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name}"))
            conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
        return server.get_uri(name)

    yield database
    admin.dispose()
    server.cleanup()


def load_trials(url: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name="digits_cnn", storage=url).get_trials()


def worker(log_dir: Path, url: str, *overrides: str) -> subprocess.Popen:
    cmd = command(log_dir, *SEARCH, f"hydra.sweeper.storage='{url}'", *overrides)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.mark.slow  # ~100 s on 2 cores: run by .ci/run's second stage
def test_two_workers_share_one_postgres_study(postgres, tmp_path):
    """Two processes ("machines": each its own log dir) on one study of 3 trials: 3 distinct
    trials run once each, both workers took part, and the budget holds."""
    url = postgres("two_workers")
    workers = [
        worker(tmp_path / f"machine{i}", url, NO_PRUNING, "hydra.sweeper.n_trials=3")
        for i in (0, 1)
    ]
    outputs = [w.communicate(timeout=400)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    trials = load_trials(url)
    counted = [t for t in trials if "surplus" not in t.user_attrs]
    assert [t.state.name for t in counted] == ["COMPLETE"] * 3  # n_trials respected
    assert len({t.number for t in counted}) == 3
    assert len({tuple(sorted(t.params.items())) for t in counted}) == 3  # distinct params
    assert len({t.user_attrs["worker"] for t in counted}) == 2, "both workers ran trials"
    run_dirs = {t.user_attrs["run_dir"] for t in counted}
    assert len(run_dirs) == 3 and all(Path(d).is_dir() for d in run_dirs)
    for machine in (tmp_path / "machine0", tmp_path / "machine1"):
        best = machine / "train" / "searches" / "digits_cnn" / "best_params.yaml"
        result = yaml.safe_load(best.read_text())
        assert result["storage"].startswith("postgresql://")
        assert sum(result["trials"].values()) == 3  # each worker reports the whole study


@pytest.mark.slow
def test_postgres_study_prunes_and_resumes_after_a_kill(postgres, tmp_path):
    """As with SQLite (test_sweeps.py): a pruned trial, then a worker killed mid-trial; the
    same command resumes the study, re-queues the cut trial once and stops at n_trials."""
    url = postgres("prune_resume")
    log_dir = tmp_path / "logs"
    pruner = (
        "hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner,n_startup_trials:1,"
        "n_warmup_steps:0}"
    )
    enqueue = (
        "hydra.sweeper.enqueue_trials=[{model.optimizer.lr:0.003,model.net.dropout:0.1},"
        "{model.optimizer.lr:1.0e-7,model.net.dropout:0.1}]"
    )
    first = worker(log_dir, url, pruner, enqueue, "hydra.sweeper.n_trials=4")
    trial_2 = log_dir / "train" / "searches" / "digits_cnn" / "trial_2" / "sweep_job.json"
    deadline = time.time() + 300
    while not trial_2.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    os.kill(first.pid, signal.SIGKILL)  # trials 0 and 1 done, trial 2 running
    first.communicate()
    assert [t.state.name for t in load_trials(url)] == ["COMPLETE", "PRUNED", "RUNNING"]

    again = worker(log_dir, url, pruner, enqueue, "hydra.sweeper.n_trials=4")
    output = again.communicate(timeout=400)[0]
    assert again.returncode == 0, output[-3000:]
    trials = load_trials(url)
    assert trials[2].state.name == "FAIL" and trials[2].user_attrs["interrupted"]
    assert trials[3].user_attrs["retry_of"] == 2 and trials[3].params == trials[2].params
    counted = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(counted) == 4  # 2 before the kill + the re-run + one new: the budget holds
    assert [t.state.name for t in trials[:2]] == ["COMPLETE", "PRUNED"]


@pytest.mark.slow  # make test's 5 minutes: the slow stage runs it
def test_unreachable_storage_is_one_line(tmp_path):
    """A server that is not there: one line naming the URL (password hidden), exit 2."""
    url = f"postgresql://user:secret@/db?host={tmp_path}"  # no server on this socket dir
    proc = worker(tmp_path / "logs", url, NO_PRUNING, "hydra.sweeper.n_trials=1")
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 2, output[-3000:]
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "cannot use the study's database" in lines[0], output[-2000:]
    assert "secret" not in output and "Traceback" not in output


@pytest.mark.parametrize(
    ("override", "shown"),
    [
        (
            "hydra.sweeper.storage=postgresql://u:pw@h/db",
            "hydra.sweeper.storage=postgresql://u:***@h/db",
        ),
        ("+hydra.sweeper.storage=mysql://u:pw@h/db", "+hydra.sweeper.storage=mysql://u:***@h/db"),
        ("hydra.sweeper.storage=postgresql://u@h/db", "hydra.sweeper.storage=postgresql://u@h/db"),
        (
            "hydra.sweeper.storage=weird://u:pw@h:notaport",
            "hydra.sweeper.storage=weird://u:***@h:notaport",
        ),
        # an unencoded @ or / in the password: hidden whole, not split where a parser would
        (
            "hydra.sweeper.storage=postgresql://u:pa@s/s@h/db?x=1",
            "hydra.sweeper.storage=postgresql://u:***@h/db?x=1",
        ),
        ("model.optimizer.lr=0.1", "model.optimizer.lr=0.1"),
    ],
)
def test_the_printed_resume_command_hides_a_storage_password(override, shown):
    from litlab.sweeps.plan import without_password

    assert without_password(override) == shown
