"""The Optuna search behind `python src/train.py -m hparams_search=NAME` (current Optuna, not
hydra-optuna-sweeper, which pins optuna < 3); its settings and search space: docs/sweeps.md.

- Each trial is one Hydra job: the sampled params reach it as ordinary overrides, so a DDP
  child rank that re-executes the job with its overrides trains the same params. Only the
  trial's id travels in an environment variable (`ENV`, via `hydra.job.env_set`): rank 0
  reports to the study, the other ranks only follow its pruning decision
  (litlab.callbacks.optuna_pruning).
- The study is the unit of resumption (a SQLite file in the sweep dir, or a database URL that
  workers on many machines share): the same command continues it, and `n_trials` is its total.
  Trials cut short by a kill or Ctrl-C do not count and are re-queued with their params. A
  SQLite file is opened only when the study may write it (`check_sqlite`): Optuna would add its
  tables to the user's notes or another program's database.
- Seeded: the sampler's random state is reseeded from (seed, trial number) before each trial,
  so workers never draw the same random params.
- A resumed study trains its new trials as its first ones were trained (`check_study`): trials
  of different budgets ranked together would show no sign but Optuna's "Using an existing
  study". Keys that only say where files go or how much is printed (`plan.MACHINE_LOCAL`) may
  differ, so workers on other machines can share a study."""

import json
import logging
import os
import re
import socket
import sqlite3
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from litlab.compat import optuna as compat
from litlab.compat.hydra import job_outcome
from litlab.errors import UserError, one_line
from litlab.report.files import settings_of
from litlab.sweeps import plan
from litlab.sweeps.plan import MACHINE_LOCAL, hide_password, setting_changes
from litlab.sweeps.summary_stats import finite
from litlab.utils import commands

log = logging.getLogger(__name__)
ENV = "LITLAB_OPTUNA_TRIAL"
SWEEP_ID = "sweep_id"  # the study's user attribute: the id of the sweep whose folder holds it
DIRECTIONS = {"max": "maximize", "maximize": "maximize", "min": "minimize", "minimize": "minimize"}


class TrialFailed(Exception):
    """The trial's job raised or returned no objective (recorded as a FAIL trial)."""


def instantiate(spec: dict | None, **extra):
    import hydra

    return hydra.utils.instantiate(spec, **extra) if spec else None


def counts(trial) -> bool:
    """Whether a trial uses the study's budget (interrupted and surplus trials do not)."""
    from optuna.trial import TrialState

    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING):
        return True
    return trial.state == TrialState.FAIL and "error" in trial.user_attrs


def requeue_interrupted(study) -> int:
    """Trials left RUNNING by a dead process of this host, or failed by Ctrl-C: mark them
    interrupted (they stop counting) and queue their params again."""
    import psutil
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    host, requeued = socket.gethostname(), 0
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in trials}
    for trial in trials:
        attrs = trial.user_attrs
        worker_host, _, pid = str(attrs.get("worker", "")).rpartition(":")
        dead = (
            trial.state == TrialState.RUNNING
            and worker_host == host
            and pid.isdigit()
            and not psutil.pid_exists(int(pid))
        )
        cut = trial.state == TrialState.FAIL and not {"error", "surplus"} & attrs.keys()
        if trial.number in retried or not (dead or cut):
            continue
        if dead:
            try:  # atomic: of two workers that find one dead trial, one claims it
                compat.mark_interrupted(study, trial)
            except UpdateFinishedTrialError:
                continue
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        log.info("trial %d was interrupted: queued again with its params", trial.number)
        requeued += 1
    return requeued


def search_settings(opts, arguments: list[str]) -> tuple[dict, list[str], str]:
    """(search space, fixed overrides, direction), or one line saying what is wrong."""
    space, fixed = build_space(opts.get("params"), arguments)
    if not space:
        raise UserError(
            "the search space is empty: set hydra.sweeper.params (see "
            "configs/hparams_search/) or pass key=interval(...)/choice(...)"
        )
    direction = DIRECTIONS.get(str(opts["direction"]))
    if direction is None:
        raise UserError(
            f"hydra.sweeper.direction={opts['direction']} is not valid; choose maximize or minimize"
        )
    return space, fixed, direction


def check_components(opts) -> None:
    """The sampler and the pruner build, as the search builds them, before the sweep dir is
    made: a target that is not there or a bad argument is one line naming the key, not a
    study file written and an empty error after the sweep was announced."""
    for key in ("sampler", "pruner"):
        try:
            instantiate(opts.get(key))
        except Exception as err:  # noqa: BLE001  (Hydra wraps what the class raised)
            called = "Error in call to target" in str(err) and err.__cause__ is not None
            said = one_line(err.__cause__ if called else err, with_type=called, limit=300)
            said = said.split(", set env var HYDRA_FULL_ERROR")[0]
            raise UserError(
                f"hydra.sweeper.{key} cannot be built: {said}; valid: an optuna.{key}s class "
                f"as _target_ with its arguments{', or null' * (key == 'pruner')}"
            ) from None


def _open_study(opts, sweep_dir: Path, fixed: list[str], direction: str):
    """(study, its storage URL, the sampler's seed): created, or loaded to resume it when its
    settings match this command's (check_study), with the known-good params queued
    and the trials of dead workers queued again."""
    import optuna

    url, storage = storage_for(opts.get("storage"), sweep_dir, opts.get("heartbeat_interval"))
    sampler_spec = dict(opts.get("sampler") or {"_target_": "optuna.samplers.TPESampler"})
    study = optuna.create_study(
        study_name=opts["study_name"],
        storage=storage,
        direction=direction,
        load_if_exists=True,
        sampler=instantiate(sampler_spec),
        pruner=instantiate(opts.get("pruner")) or optuna.pruners.NopPruner(),
    )
    if opts.get("storage") is None:  # the sweep dir's own optuna.db: this sweep's study
        _check_own_study(study, sweep_dir)
    check_study(study, fixed, strict=opts.get("strict_resume", True))  # no mixed budgets
    for params in opts.get("enqueue_trials") or []:  # known-good params to try first
        study.enqueue_trial(dict(params), skip_if_exists=True)
    requeue_interrupted(study)
    return study, url, sampler_spec.get("seed")


def check_resumable(options: dict, arguments: list[str], sweep_dir: Path) -> None:
    """The study this command would resume, checked before the sweep dir is claimed: another
    sweep's, or one started with other settings, is refused in one line before the sweep is
    announced, its plan rewritten or its summary printed at exit (`_open_study` checks it
    again when the search starts). Read only: a new study is left to the search to create."""
    url = options.get("storage")
    if url is None and not (sweep_dir / "optuna.db").is_file():
        return
    import optuna

    storage = storage_for(url, sweep_dir, None)[1]
    try:
        study = optuna.load_study(study_name=str(options["study_name"]), storage=storage)
    except KeyError:  # no study of that name yet
        return
    if url is None:
        _check_own_study(study, sweep_dir, record=False)
    check_study(study, build_space(options.get("params"), arguments)[1], record=False,
                strict=options.get("strict_resume", True))  # fmt: skip


def _check_own_study(study, sweep_dir: Path, record: bool = True) -> None:
    """The study in the sweep dir's optuna.db is this sweep's (its plan's id, recorded with the
    study), not one copied in from another sweep, whose trials and run dirs are elsewhere."""
    own = (plan.read_plan(sweep_dir) or {}).get("id")
    if own is None:
        return
    stored = study.user_attrs.get(SWEEP_ID)
    if stored is None:  # a new study (or one from before the id): it is this sweep's now
        if record:
            study.set_user_attr(SWEEP_ID, own)
    elif stored != own:
        raise UserError(
            f"{sweep_dir / 'optuna.db'}: its study {study.study_name} is another sweep's (sweep "
            f"id {str(stored)[:40]!r}, this sweep's {plan.PLAN} says {own}); a sweep resumes "
            f"only its own study: move the file away, or {plan.NEW_FOLDER}"
        )


class _Trials:
    """This worker's trials of the study: each one a job launched with the sampled params,
    whose objective (or failure, or pruning) goes back to the study, until the study's budget
    of `n_trials` is used by all its workers together."""

    def __init__(self, sweeper, study, space: dict, fixed: list[str], url: str, seed) -> None:
        self.sweeper, self.study, self.space, self.fixed = sweeper, study, space, fixed
        self.url, self.seed = url, seed
        self.budget = int(sweeper.options["n_trials"])

    def used(self) -> int:
        return sum(counts(t) for t in self.study.get_trials(deepcopy=False))

    def objective(self, trial) -> float:
        import optuna

        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        earlier = [t for t in self.study.get_trials(deepcopy=False) if t.number < trial.number]
        if sum(counts(t) for t in earlier) >= self.budget:  # another worker took the last trial
            trial.set_user_attr("surplus", True)
            self.study.stop()
            raise TrialFailed("the study's budget was used by other workers")
        try:
            return self.run_trial(trial)
        except optuna.TrialPruned:
            raise
        except Exception as error:  # recorded as a FAIL trial that uses the budget
            said = one_line(error, with_type=True, limit=300)
            trial.set_user_attr("error", said)
            log.warning("trial %d failed: %s", trial.number, said)
            raise

    def run_trial(self, trial) -> float:
        import optuna

        if self.seed is not None:  # the sampler's random state from (seed, trial number)
            compat.reseed_sampler(self.study.sampler, int(self.seed) * 100_003 + trial.number)
        params = suggest(trial, self.space)
        ticket = {
            "study": self.study.study_name,
            "storage": self.url,
            "trial_id": compat.trial_id(trial),
            "pruner": self.sweeper.options.get("pruner"),
        }
        overrides = [
            *self.fixed,
            *(f"{k}={as_override_value(v)}" for k, v in params.items()),
            f"++hydra.job.env_set.{ENV}={as_override_value(json.dumps(ticket))}",
        ]
        result = self.sweeper.launcher.launch([overrides], initial_job_idx=trial.number)[0]
        trial.set_user_attr("run_dir", str(result.hydra_cfg.hydra.runtime.output_dir))
        outcome = job_outcome(result)
        if result.status.name == "COMPLETED":
            if finite(outcome):
                return float(outcome)
            raise TrialFailed(
                f"the job returned {outcome!r}, not a finite objective (is optimized_metric="
                f"{self.sweeper.config.get('optimized_metric')} logged?)"
            )
        if type(outcome).__name__ == "TrialPruned":
            raise optuna.TrialPruned(str(outcome))
        raise TrialFailed(one_line(outcome, with_type=True, limit=300)) from outcome

    def stop_when_done(self, study, _trial) -> None:
        requeue_interrupted(study)  # a worker of this host died meanwhile
        if self.used() >= self.budget:
            study.stop()


def run_search(sweeper, arguments: list[str]) -> None:
    """Create or load the study, run trials until the budget is used, write the results."""
    opts, config = sweeper.options, sweeper.config
    sweep_dir = Path(str(config.hydra.sweep.dir))  # made and marked by runs.sweep_dir
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    entry = str(OmegaConf.select(config, "hydra.job.config_name", default="train"))
    space, fixed, direction = search_settings(opts, arguments)
    study, url, seed = _open_study(opts, sweep_dir, fixed, direction)
    trials = _Trials(sweeper, study, space, fixed, url, seed)
    if trials.used() >= trials.budget:
        log.info("study %s already has its %d trials", study.study_name, trials.budget)
    else:
        try:
            study.optimize(
                trials.objective,
                timeout=opts.get("timeout"),
                catch=(Exception,),
                callbacks=[trials.stop_when_done],
            )
        except KeyboardInterrupt:  # Ctrl-C: the results so far, then stop
            write_results(study, sweep_dir, url, fixed, final=False, entry=entry)
            raise
    write_results(study, sweep_dir, url, fixed, entry=entry)


def write_results(
    study, sweep_dir: Path, url: str, fixed: list[str], final: bool = True, entry: str = "train"
) -> None:
    """best_params.yaml and optimization_history.png in the sweep dir; raise if none completed.
    Its `rerun` command trains the best trial again with `python src/<entry>.py`."""
    from optuna.trial import TrialState

    trials = [t for t in study.get_trials(deepcopy=False) if "surplus" not in t.user_attrs]
    states = Counter(t.state.name.lower() for t in trials if counts(t))
    completed = [t for t in trials if t.state == TrialState.COMPLETE]
    result = {
        "study_name": study.study_name,
        "storage": hide_password(url),
        "direction": study.direction.name.lower(),
        "trials": dict(states),
    }
    if completed:
        best = study.best_trial
        result |= {
            "best_value": best.value,
            "best_trial": best.number,
            "best_params": best.params,
            "best_run_dir": best.user_attrs.get("run_dir"),
            "best_overrides": [f"{k}={as_override_value(v)}" for k, v in best.params.items()],
        }
        rerun = commands.command(entry, [*fixed, *result["best_overrides"]])
        try:  # the params are read from the study's database: data, printed only when sound
            result["rerun"] = commands.printable(rerun, entry=entry, multirun=False)
        except commands.Untrusted as why:
            result["rerun"] = None
            log.warning("the best trial's params make no command litlab prints (%s)", why)
    OmegaConf.save(OmegaConf.create(result), sweep_dir / "best_params.yaml")
    if completed:
        import matplotlib

        matplotlib.use("Agg")
        from optuna.visualization.matplotlib import plot_optimization_history

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "experimental" warnings of optuna's plots
            ax = plot_optimization_history(study)
        ax.figure.tight_layout()
        ax.figure.savefig(sweep_dir / "optimization_history.png", dpi=100)
    print(
        f"\nOptuna study {study.study_name}: {dict(states)} -> {sweep_dir / 'best_params.yaml'}",
        flush=True,
    )
    if not completed:
        if final:
            raise RuntimeError(f"no trial of study {study.study_name} completed (see summary.md)")
        return
    again = "its params: best_params.yaml"
    if result["rerun"]:
        again = f"train it again with:\n  {result['rerun']}"
    print(f"best {result['best_value']:.4f} (trial {result['best_trial']}); {again}", flush=True)


# --------------------------------------------------------------- storage
def storage_for(url: str | None, sweep_dir: Path, heartbeat_interval: int | None):
    """RDB storage at `url`, or a SQLite file in the sweep dir; waits on a busy SQLite file."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    url = url or f"sqlite:///{(sweep_dir / 'optuna.db').resolve()}"
    check_sqlite(url)
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    heartbeat = (
        {"heartbeat_interval": heartbeat_interval, "grace_period": 3 * heartbeat_interval}
        if heartbeat_interval
        else {}
    )
    for attempt in range(5):
        try:
            return url, optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **heartbeat)
        except ModuleNotFoundError as err:  # e.g. mysql:// without its driver
            raise UserError(
                f"hydra.sweeper.storage={hide_password(url)}: its database driver is not "
                f"installed ({err}); PostgreSQL URLs use psycopg (requirements.txt)"
            ) from None
        except SQLAlchemyError as err:  # workers started together race to create the tables
            if attempt == 4:
                raise UserError(
                    f"hydra.sweeper.storage={hide_password(url)}: cannot use the study's "
                    f"database ({one_line(err, limit=200)}); check that the server runs and "
                    f"the URL (user, password, host, database) is right"
                ) from None
            time.sleep(0.5 * (attempt + 1))


SQLITE_MAGIC = b"SQLite format 3\x00"


def _sqlite_path(url: str) -> Path | None:
    """The file of a `sqlite:///<path>` URL (None: another database, or in memory)."""
    if not url.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url).database
    except Exception:  # noqa: BLE001  (a malformed URL: SQLAlchemy says so when it opens it)
        return None
    return Path(database) if database and database != ":memory:" else None


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


SCHEMA_WAIT_S = 10.0  # how long a part of Optuna's schema may take to be completed


def _complete_tables(path: Path, required: frozenset[str]) -> set[str]:
    """The file's tables once no other worker is creating Optuna's (`required`, and the
    migrations' record): a file holding a part of them (and nothing else) is read again for up
    to `SCHEMA_WAIT_S`, since a worker sharing the study creates them one by one as it starts."""
    deadline = time.monotonic() + SCHEMA_WAIT_S
    tables = _tables(path)
    known = required | {compat.MIGRATIONS_TABLE}
    while tables and tables <= known and not required <= tables:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
        tables = _tables(path)
    return tables


def check_sqlite(url: str) -> None:
    """One `UserError` naming the file unless the SQLite file of `url` is one an Optuna study
    may be written into: a regular file (never through a link, nor its journal), new or empty,
    or a database that is an Optuna storage or has no tables yet; other URLs pass."""
    path = _sqlite_path(url)
    if path is None:
        return
    head = f"hydra.sweeper.storage={hide_password(url)}"
    valid = "give a new file, or the database of an Optuna study"
    for extra in ("", "-journal", "-wal", "-shm"):
        file = Path(f"{path}{extra}")
        if file.is_symlink():
            raise UserError(
                f"{head}: {file} is a symbolic link to {os.readlink(file)}; a study's database "
                f"is written only where it is, never through a link: {valid}"
            )
        if file.exists() and not file.is_file():
            raise UserError(f"{head}: {file} is not a regular file; {valid}")
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        magic = f.read(len(SQLITE_MAGIC))
    if magic != SQLITE_MAGIC:
        raise UserError(f"{head}: {path} file is not a database (SQLite); {valid}")
    try:
        tables = _complete_tables(path, required := compat.storage_tables())
    except sqlite3.Error as err:
        raise UserError(f"{head}: {path} cannot be read as SQLite ({one_line(err)}); {valid}")
    if foreign := tables - required - {compat.MIGRATIONS_TABLE}:
        shown = ", ".join(sorted(foreign)[:3]) + (", ..." if len(foreign) > 3 else "")
        raise UserError(
            f"{head}: {path} is the database of another program (tables {shown}), not of an "
            f"Optuna study; Optuna would add its tables to it: {valid}"
        )
    if tables and (missing := required - tables):
        raise UserError(
            f"{head}: {path} holds a part of an Optuna study's tables ({len(missing)} of "
            f"{len(required)} missing, still after {SCHEMA_WAIT_S:.0f} s): {valid}"
        )


# -------------------------------------------------------- study settings
ATTR = "fixed_overrides"


def check_study(study, fixed: list[str], strict: bool = True, record: bool = True) -> None:
    """Store the settings with a new study (`record`); compare them with a resumed one's."""
    current = settings_of(fixed, skip=MACHINE_LOCAL)
    stored = study.user_attrs.get(ATTR)
    if stored is None:  # a new study (or one from before this check): these are its settings
        if record:
            study.set_user_attr(ATTR, current)
        return
    changes = ", ".join(setting_changes(stored, current))
    if not changes:
        return
    name = study.study_name
    if strict:
        raise UserError(
            f"study {name} was started with other settings ({changes}): its trials would not be "
            f"comparable. Start a new study with hydra.sweeper.study_name={name}_2, rerun with "
            "the study's settings, or mix them on purpose with hydra.sweeper.strict_resume=false"
        )
    log.warning("study %s resumed with other settings on purpose (%s)", name, changes)


# ---------------------------------------------------------- search space
SIMPLE = re.compile(r"^[\w.\-/:@]+$")
SPEC_KEYS = {"type", "low", "high", "log", "step", "choices"}


def as_override_value(value: Any) -> str:
    """A sampled value written as Hydra override syntax."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if SIMPLE.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _flatten(params: dict, prefix: str = "") -> dict[str, Any]:
    """`{model: {net: {dropout: spec}}}` (a command-line key) -> `{model.net.dropout: spec}`."""
    flat = {}
    for key, spec in params.items():
        name = f"{prefix}{key}"
        if isinstance(spec, dict) and not SPEC_KEYS & set(spec):
            flat.update(_flatten(spec, name + "."))
        else:
            flat[name] = spec
    return flat


def from_spec(name: str, spec: Any):
    """One Optuna distribution from a YAML entry (dict, list of choices, or sweep string)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(spec, str):
        return from_override(f"{name}={spec}")
    if isinstance(spec, list | tuple):
        return CategoricalDistribution(list(spec))
    if not isinstance(spec, dict):
        raise UserError(
            f"search space entry {name}: expected a dict such as "
            f"{{type: float, low: 0.0, high: 1.0}}, a list of choices or "
            f"interval(...)/choice(...), got {spec!r}"
        )
    kind = spec.get("type")
    if not kind:
        ints = all(isinstance(spec.get(k), int) for k in ("low", "high"))
        kind = "categorical" if "choices" in spec else "int" if ints else "float"
    log, step = bool(spec.get("log")), spec.get("step")
    try:
        if kind == "categorical":
            return CategoricalDistribution(list(spec["choices"]))
        if kind == "int":
            return IntDistribution(
                int(spec["low"]), int(spec["high"]), log=log, step=int(step or 1)
            )
        if kind == "float":
            step = None if step is None else float(step)
            return FloatDistribution(float(spec["low"]), float(spec["high"]), log=log, step=step)
    except (KeyError, ValueError) as err:
        raise UserError(f"search space entry {name}: {err} (spec {spec})") from err
    raise UserError(
        f"search space entry {name}: type {kind!r} is not valid; choose float, int or categorical"
    )


def from_override(text: str):
    """One Optuna distribution from Hydra sweep syntax, e.g. `lr=tag(log,interval(1e-4,1))`."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    override = OverridesParser.create().parse_overrides([text])[0]
    sweep = override.value()
    if isinstance(sweep, ChoiceSweep):
        return CategoricalDistribution(list(sweep.list))
    if isinstance(sweep, RangeSweep):
        if all(isinstance(v, int) for v in (sweep.start, sweep.stop, sweep.step)):
            return IntDistribution(sweep.start, sweep.stop - 1, step=sweep.step)
        return CategoricalDistribution(list(override.sweep_iterator()))
    if isinstance(sweep, IntervalSweep):
        if "int" in sweep.tags:
            return IntDistribution(int(sweep.start), int(sweep.end), log="log" in sweep.tags)
        return FloatDistribution(sweep.start, sweep.end, log="log" in sweep.tags)
    raise UserError(
        f"{text}: not a search dimension; use choice(...), range(...) or "
        "interval(...) (optionally tag(log, ...))"
    )


def build_space(params: dict | None, arguments: list[str]) -> tuple[dict, list[str]]:
    """(search space {key: distribution}, fixed overrides) from YAML params and the command line.

    Command-line sweep overrides (`key=choice(...)`) join the search space; all other
    overrides are passed unchanged to every trial (and pin a key of the YAML space).
    """
    space = {name: from_spec(name, spec) for name, spec in _flatten(params or {}).items()}
    fixed = []
    for text, override in zip(arguments, OverridesParser.create().parse_overrides(arguments)):
        if override.is_sweep_override():
            space[override.get_key_element()] = from_override(text)
        else:
            fixed.append(text)
            space.pop(override.get_key_element().lstrip("+~"), None)  # pinned by the user
    return space, fixed


def suggest(trial, space: dict) -> dict[str, Any]:
    """Sample every dimension of `space` for this trial."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    values = {}
    for name, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            values[name] = trial.suggest_categorical(name, dist.choices)
        else:
            pick = trial.suggest_int if isinstance(dist, IntDistribution) else trial.suggest_float
            values[name] = pick(name, dist.low, dist.high, log=dist.log, step=dist.step)
    return values
