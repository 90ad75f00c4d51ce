"""A search's own settings (`hydra.sweeper.*` of litlab's Optuna sweeper) are refused in one
line before its folder is claimed: Hydra's structured config took `n_trials=0`, `timeout=-5`
or `heartbeat_interval=0`, and the search then announced its folder, wrote an empty study and
`best_params.yaml: {}`, and ended on `RuntimeError: no trial ... completed`; a sampler that
could not be built ended on `error: ` and nothing more; a bad direction, pruner argument or
an empty search space was refused only after the folder, its plan and its lock were written
and a resume command for the refused settings printed. In process: the line, the exit code and
what is on disk are the point, not the process."""

import sys

import pytest
from helpers.here import run_here


@pytest.mark.parametrize(
    "overrides, first",
    [
        (["hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials=0 has the wrong type or value; valid: an integer >= 1"),
        (["hydra.sweeper.n_trials=-2"], "hydra.sweeper.n_trials=-2 has the wrong type or value"),
        (["hydra.sweeper.timeout=-5"], "hydra.sweeper.timeout=-5.0 has the wrong type or value; valid: a number > 0 or null"),
        (["hydra.sweeper.heartbeat_interval=0"], "hydra.sweeper.heartbeat_interval=0 has the wrong type"),
        (["hydra.sweeper.direction=sideways"], "hydra.sweeper.direction=sideways has the wrong type or value; valid: maximize | minimize"),
        (["hydra.sweeper.study_name="], "hydra.sweeper.study_name='' has the wrong type or value; valid: a non-empty name"),
        (["hydra.sweeper.sampler._target_=optuna.samplers.Nope"], "hydra.sweeper.sampler cannot be built: Error locating target 'optuna.samplers.Nope'; valid: an optuna.samplers class"),
        (["hydra.sweeper.pruner.n_warmup_steps=-1"], "hydra.sweeper.pruner cannot be built: ValueError: Number of warmup steps cannot be negative"),
    ],
    ids=["no trials", "negative trials", "negative timeout", "no heartbeat", "direction", "no name", "sampler", "pruner"],
)  # fmt: skip
def test_a_bad_search_setting_is_one_line_and_writes_nothing(tmp_path, capfd, overrides, first):
    logs = tmp_path / "logs"
    cmd = ["-m", "hparams_search=digits_cnn", *overrides, f"paths.log_dir={logs}"]
    proc = run_here([sys.executable, "src/train.py", *cmd], capfd)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[0].startswith(f"error: {first}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout.strip() == ""
    assert not logs.exists()  # no sweep folder, plan, lock or study


def test_an_empty_search_space_is_refused_before_the_sweep_folder(tmp_path, capfd):
    logs = tmp_path / "logs"
    cmd = ["-m", "hydra/sweeper=litlab_optuna", f"paths.log_dir={logs}"]
    proc = run_here([sys.executable, "src/train.py", *cmd], capfd)
    assert proc.returncode == 2
    empty = (
        "error: the search space is empty: set hydra.sweeper.params (see configs/hparams_search/)"
    )
    assert proc.stderr.strip().splitlines() == [f"{empty} or pass key=interval(...)/choice(...)"]
    assert proc.stdout.strip() == "" and not logs.exists()
