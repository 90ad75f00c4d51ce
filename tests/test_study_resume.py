"""Resuming an Optuna study never mixes budgets silently: the non-searched overrides are stored
with the study, and a command with other values is refused in one line
(litlab.sweeps.optuna_search)."""

import logging

import pytest
from helpers.runs import command_in_process

from litlab.errors import UserError
from litlab.sweeps import optuna_search as study_settings

FAST = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0",
    "hydra.sweeper.pruner=null",
]


def new_study(storage=None):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name="digits_cnn", storage=storage, load_if_exists=True)


def _train(tmp_path, capfd, *overrides: str, code: int = 0) -> str:
    """`python src/train.py overrides` in this process (its real `cli.run`, argv and all; a
    refusal's exit code is SystemExit's): its stderr, the exit code asserted. The process of a
    search is test_sweeps.py's (a kill, two workers)."""
    got, _, err = command_in_process("train.py", list(overrides), tmp_path / "logs", capfd)
    assert got == code, err[-3000:]
    return err


def test_the_first_command_stores_its_settings_and_the_same_settings_resume():
    study = new_study()
    study_settings.check_study(study, ["trainer.max_epochs=3", "+data.fold=2", "paths.log_dir=/a"])
    assert study.user_attrs["fixed_overrides"] == {"trainer.max_epochs": "3", "data.fold": "2"}
    # where files go and what is printed may differ: a second worker on another machine
    study_settings.check_study(
        study,
        [
            "data.fold=2",
            "trainer.max_epochs=3",
            "paths.log_dir=/b",
            "extras.print_config=false",
            "threads=1",
            "logger=tensorboard",
        ],
    )


def test_other_settings_are_refused_naming_the_keys_and_both_ways_out(caplog):
    study = new_study()
    study_settings.check_study(study, ["trainer.max_epochs=3", "seed=1"])
    with pytest.raises(UserError) as err:
        study_settings.check_study(study, ["trainer.max_epochs=5", "seed=1", "data.batch_size=32"])
    message = str(err.value)
    assert "data.batch_size=(not set) then, 32 now, trainer.max_epochs=3 then, 5 now" in message
    assert "hydra.sweeper.study_name=digits_cnn_2" in message
    assert "hydra.sweeper.strict_resume=false" in message and "\n" not in message
    with caplog.at_level(logging.WARNING):  # on purpose: resumed, with a warning
        study_settings.check_study(study, ["trainer.max_epochs=5", "seed=1"], strict=False)
    assert "trainer.max_epochs=3 then, 5 now" in caplog.text
    assert study.user_attrs["fixed_overrides"]["trainer.max_epochs"] == "3"  # the study's own


def test_stored_settings_are_shown_escaped_in_the_one_line():
    """A study's settings are read from its database: a stored newline stays visible text in
    the refusal (it printed a line of the file's choosing)."""
    study = new_study()
    study.set_user_attr("fixed_overrides", {"trainer.max_epochs": "1\nerror: run evil.py"})
    with pytest.raises(UserError) as err:
        study_settings.check_study(study, ["trainer.max_epochs=5"])
    assert "\n" not in str(err.value)
    assert "trainer.max_epochs=1\\nerror: run evil.py then, 5 now" in str(err.value)


@pytest.mark.slow  # make test's 5 minutes: the slow stage runs it
def test_the_command_line_refuses_before_any_trial(cli, tmp_path):
    from litlab.sweeps import plan
    from litlab.utils import commands

    folder = tmp_path / "logs" / "train" / "searches" / "digits_cnn"
    folder.mkdir(parents=True)
    own = commands.command("train", ["hparams_search=digits_cnn"], multirun=True)
    plan.write_plan(folder, None, own, kind=plan.SEARCH, study="digits_cnn")  # a litlab search's
    study = new_study(f"sqlite:///{folder / 'optuna.db'}")
    study_settings.check_study(study, ["hparams_search=digits_cnn", "trainer.max_epochs=3"])
    stored_plan = (folder / plan.PLAN).read_bytes()
    proc = cli(
        "train.py",
        "hydra.mode=MULTIRUN",
        "hparams_search=digits_cnn",
        "trainer.max_epochs=5",
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    expected = (
        "error: study digits_cnn was started with other settings (trainer.max_epochs=3 then, "
        "5 now): its trials would not be comparable. Start a new study with "
        "hydra.sweeper.study_name=digits_cnn_2, rerun with the study's settings, or mix them on "
        "purpose with hydra.sweeper.strict_resume=false"
    )
    assert proc.stderr.strip().splitlines() == [expected]
    # refused before the sweep is announced: no resume command of the refused settings printed
    # or written into the plan, no summary at exit (the refusal once came after all three)
    assert proc.stdout.strip() == "", proc.stdout[-2000:]
    assert (folder / plan.PLAN).read_bytes() == stored_plan
    assert not list(folder.glob("summary*")) and not (folder / "report.html").exists()
    assert new_study(f"sqlite:///{folder / 'optuna.db'}").trials == []
    assert not list(folder.glob("trial_*"))


@pytest.mark.slow
def test_a_real_search_resumed_with_another_budget(tmp_path, capfd):
    """The issue's sequence, with 1-epoch trials: 1 trial; the same search with 2 epochs is
    refused; resumed on purpose it runs the second trial; a new study name starts afresh."""
    search = ["hydra.mode=MULTIRUN", "hparams_search=digits_cnn", *FAST]
    _train(tmp_path, capfd, *search, "hydra.sweeper.n_trials=1")
    refused = _train(
        tmp_path, capfd, *search, "hydra.sweeper.n_trials=2", "trainer.max_epochs=2", code=2
    )
    assert "trainer.max_epochs=1 then, 2 now" in refused
    folder = tmp_path / "logs" / "train" / "searches"
    db = f"sqlite:///{folder / 'digits_cnn' / 'optuna.db'}"
    assert len(new_study(db).trials) == 1
    _train(
        tmp_path,
        capfd,
        *search,
        "hydra.sweeper.n_trials=2",
        "trainer.max_epochs=2",
        "hydra.sweeper.strict_resume=false",
    )
    assert len(new_study(db).trials) == 2
    _train(
        tmp_path,
        capfd,
        *search,
        "hydra.sweeper.n_trials=1",
        "trainer.max_epochs=2",
        "hydra.sweeper.study_name=digits_cnn_2",
    )
    assert (folder / "digits_cnn_2" / "best_params.yaml").is_file()
