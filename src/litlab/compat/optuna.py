"""Optuna internals litlab uses (checked against optuna 5.0.0).

- `Study._storage` and `FrozenTrial._trial_id`: a trial whose worker died is marked failed
  through the storage, atomically (of two workers that find it, one claims it), and a trial is
  named to the job that runs it by its storage id (sweeps/optuna_search).
"""

CHECKED_WITH = "5.0.0"


def _fail(what: str):
    import optuna

    from litlab.compat import missing

    return missing("optuna", CHECKED_WITH, optuna.__version__, what)


def trial_id(trial) -> int:
    """The storage's id of a (frozen) trial."""
    return trial._trial_id


def mark_interrupted(study, trial) -> None:
    """Fail a trial whose worker died; raises optuna's UpdateFinishedTrialError when another
    worker did it first."""
    from optuna.trial import TrialState

    study._storage.set_trial_user_attr(trial._trial_id, "interrupted", True)
    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


def check() -> None:
    import optuna

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    trial = study.ask()
    frozen = study.trials[0]
    if not hasattr(study, "_storage"):
        raise _fail("Study._storage")
    if getattr(frozen, "_trial_id", None) != trial._trial_id:
        raise _fail("FrozenTrial._trial_id")
    for name in ("set_trial_user_attr", "set_trial_state_values"):
        if not callable(getattr(study._storage, name, None)):
            raise _fail(f"BaseStorage.{name}")
