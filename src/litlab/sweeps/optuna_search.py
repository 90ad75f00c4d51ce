"""The Optuna search behind `python src/train.py -m hparams_search=NAME` (current Optuna, not
hydra-optuna-sweeper, which pins optuna < 3).

- Each trial is one Hydra job: the sweeper samples the params and passes them as ordinary
  overrides (`model.optimizer.lr=0.0031`), so a DDP child rank that re-executes the job with
  its overrides trains the same params. Only the trial's id travels in an environment variable
  (`LITLAB_OPTUNA_TRIAL`, via `hydra.job.env_set`): rank 0 reports to the study, the other ranks
  only follow its pruning decision (litlab.callbacks.optuna_pruning).
- Storage: a SQLite file in the sweep dir by default, or any database URL. The study is the
  unit of resumption: the same command (same study name) continues it, and several workers on
  one storage share it. `n_trials` is the study's total: completed, pruned, raised and running
  trials count; trials cut short by a kill or Ctrl-C do not and are re-queued with their params.
- Seeded: the sampler's random state is reseeded from (seed, trial number) before each trial,
  so workers never draw the same random params and a trial's draw does not depend on which
  worker asked for it.
"""

import json
import logging
import os
import socket
from pathlib import Path

from omegaconf import OmegaConf

from litlab.compat import optuna as compat
from litlab.compat.hydra import job_outcome
from litlab.errors import UserError, one_line
from litlab.sweeps import search_space, study_settings
from litlab.sweeps.storage import hide_password, storage_for
from litlab.sweeps.summary_render import finite
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


def reseed(sampler, seed: int | None, number: int) -> None:
    """Reseed the sampler's random state from (seed, trial number) (TPE, random, GP, CMA-ES)."""
    if seed is None:
        return
    for part in (sampler, getattr(sampler, "_random_sampler", None)):
        lazy = getattr(part, "_rng", None)
        if lazy is not None and hasattr(lazy, "rng"):
            lazy.rng.seed((int(seed) * 100_003 + number) % 2**32)


def counts(trial) -> bool:
    """Whether a trial uses the study's budget (interrupted and surplus trials do not)."""
    from optuna.trial import TrialState

    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING):
        return True
    return trial.state == TrialState.FAIL and "error" in trial.user_attrs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def requeue_interrupted(study) -> int:
    """Trials left RUNNING by a dead process of this host, or failed by Ctrl-C: mark them
    interrupted (they stop counting) and queue their params again."""
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
            and not _alive(int(pid))
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


def _settings(opts, arguments: list[str]) -> tuple[dict, list[str], str]:
    """(search space, fixed overrides, direction), or one line saying what is wrong."""
    space, fixed = search_space.build(opts.get("params"), arguments)
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


def _open_study(opts, sweep_dir: Path, fixed: list[str], direction: str):
    """(study, its storage URL, the sampler's seed): created, or loaded to resume it when its
    settings match this command's (study_settings.check), with the known-good params queued
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
    study_settings.check(study, fixed, strict=opts.get("strict_resume", True))  # no mixed budgets
    for params in opts.get("enqueue_trials") or []:  # known-good params to try first
        study.enqueue_trial(dict(params), skip_if_exists=True)
    requeue_interrupted(study)
    return study, url, sampler_spec.get("seed")


def _check_own_study(study, sweep_dir: Path) -> None:
    """The study in the sweep dir's optuna.db is this sweep's (its plan's id, recorded with the
    study), not one copied in from another sweep, whose trials and run dirs are elsewhere."""
    from litlab.sweeps import plan

    own = (plan.read(sweep_dir) or {}).get("id")
    if own is None:
        return
    stored = study.user_attrs.get(SWEEP_ID)
    if stored is None:  # a new study (or one from before the id): it is this sweep's now
        study.set_user_attr(SWEEP_ID, own)
    elif stored != own:
        raise UserError(
            f"{sweep_dir / 'optuna.db'}: its study {study.study_name} is another sweep's (sweep "
            f"id {str(stored)[:40]!r}, this sweep's {plan.PLAN} says {own}); a sweep resumes "
            f"only its own study: move the file away, or give this sweep a new hydra.sweep.dir "
            f"(or none: a new timestamped one)"
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

        reseed(self.study.sampler, self.seed, trial.number)
        params = search_space.suggest(trial, self.space)
        ticket = {
            "study": self.study.study_name,
            "storage": self.url,
            "trial_id": compat.trial_id(trial),
            "pruner": self.sweeper.options.get("pruner"),
        }
        overrides = [
            *self.fixed,
            *(f"{k}={search_space.as_override_value(v)}" for k, v in params.items()),
            f"++hydra.job.env_set.{ENV}={search_space.as_override_value(json.dumps(ticket))}",
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


def run(sweeper, arguments: list[str]) -> None:
    """Create or load the study, run trials until the budget is used, write the results."""
    opts, config = sweeper.options, sweeper.config
    sweep_dir = Path(str(config.hydra.sweep.dir))  # made and marked by runs.sweep_dir
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    entry = str(OmegaConf.select(config, "hydra.job.config_name", default="train"))
    space, fixed, direction = _settings(opts, arguments)
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
    import warnings
    from collections import Counter

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
        result.update(
            {
                "best_value": best.value,
                "best_trial": best.number,
                "best_params": best.params,
                "best_run_dir": best.user_attrs.get("run_dir"),
                "best_overrides": [
                    f"{k}={search_space.as_override_value(v)}" for k, v in best.params.items()
                ],
            }
        )
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
    if not completed and final:
        raise RuntimeError(f"no trial of study {study.study_name} completed (see summary.md)")
    if not completed:
        return
    again = (
        f"train it again with:\n  {result['rerun']}"
        if result["rerun"]
        else "its params: best_params.yaml"
    )
    print(f"best {result['best_value']:.4f} (trial {result['best_trial']}); {again}", flush=True)
