"""Optuna internals litlab uses (checked against optuna 5.0.0).

- `Study._storage` and `FrozenTrial._trial_id`: a trial whose worker died is marked failed
  through the storage, atomically (of two workers that find it, one claims it), and a trial is
  named to the job that runs it by its storage id (sweeps/optuna_search);
- a sampler's `_rng` (a `LazyRandomState`) and TPE's `_random_sampler`: reseeded from (seed,
  trial number) before each trial, so a seeded search draws the same trials whichever worker
  asks (sweeps/optuna_search);
- `optuna.storages._rdb.models.BaseModel.metadata`: the tables an RDB storage creates, so a
  SQLite file is known as a study's (or a part of one being created) by the installed Optuna's
  own schema, not by a list copied from one version (sweeps/optuna_search.check_sqlite).
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


def reseed_sampler(sampler, seed: int) -> None:
    """Reseed the sampler's random state (TPE's, with its random sampler for the start-up
    trials, random, GP, CMA-ES); one without such a state is left as it is."""
    for part in (sampler, getattr(sampler, "_random_sampler", None)):
        lazy = getattr(part, "_rng", None)
        if lazy is not None and hasattr(lazy, "rng"):
            lazy.rng.seed(seed % 2**32)


def storage_tables() -> frozenset[str]:
    """The tables of a complete Optuna RDB storage (its SQLAlchemy models)."""
    from optuna.storages._rdb import models

    return frozenset(models.BaseModel.metadata.tables)


# alembic's record of the schema's migrations, which Optuna stamps beside its own tables
MIGRATIONS_TABLE = "alembic_version"


def check_optuna() -> None:
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
    try:
        tables = storage_tables()
    except (ImportError, AttributeError):
        tables = frozenset()
    if not {"studies", "trials"} <= tables:
        raise _fail("optuna.storages._rdb.models.BaseModel.metadata")
    tpe = optuna.samplers.TPESampler(seed=0)
    if not hasattr(getattr(tpe, "_rng", None), "rng"):
        raise _fail("TPESampler._rng.rng")
    if not hasattr(getattr(getattr(tpe, "_random_sampler", None), "_rng", None), "rng"):
        raise _fail("TPESampler._random_sampler._rng.rng")
