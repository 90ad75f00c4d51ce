"""`ckpt_path=last` and `ckpt_path=<run dir>`: resume a run inside its own run dir.

Hydra picks the output dir before the task starts, so the choice is part of the config:
train.yaml and compress.yaml set

    hydra.run.dir: ${resume_run_dir:${oc.select:ckpt_path,null},${paths.log_dir},${task_name},<new dir>}

which Hydra resolves once: `last` is the newest run dir of the task whose last.ckpt trained
the composed model on the composed data, a run dir is that run, anything else a new one. So
logs and checkpoints continue in the same folder (its config in `.hydra/resume-<time>/`); the
recipe then turns the value into the file (`resolve_checkpoint`), or refuses it in one line.
A checkpoint *file* keeps Lightning's meaning: resume from it in a new run dir.

Scheduler jobs (SLURM, torchrun, submitit) resume in place with no argument: a job's run dir
is named by its job id (`job_run_dir`, the same on every node and on a requeue), the id is
written into it (`mark_job`), and a dir holding that id and an unfinished last.ckpt is a
restarted job (`requeued_checkpoint`). A finished run (metrics.json written) is never
continued. Imports os, pathlib and omegaconf only (cheap, before Hydra runs).

A resume takes the run's own settings (`adopt`): `federate.py federate.rounds=8` stopped, then
`ckpt_path=<run dir>` must go on with 8 rounds, not the default 20. So the stored run config
is the default of every key a recipe lets it set (`roots`); a key this command's overrides set
otherwise is refused in one line naming both values; where things are (`paths`, `*_dir`,
`*_file`) stays this command's. The stored config is data (`trust.check_is_data` first): a
`_target_` it sets must be a kind the recipe builds there (`targets`)."""

import itertools
import os
import re
import time
from pathlib import Path

from omegaconf import OmegaConf

from litlab.checkpointing import trust
from litlab.errors import UserError
from litlab.utils.distributed import rank  # as the launcher set it, before any process group
from litlab.utils.sweep_records import FINISHED  # a run's end: its metrics file

LAST = "last"
RESUMABLE_CONFIGS = ("train", "compress", "federate")  # their configs use hydra/resumable.yaml
JOB_FILE = "job_id.txt"  # the scheduler job that runs in a run dir (a requeue finds it there)


def cluster_job() -> str | None:
    """The id of the scheduler job this process belongs to, the same on every node and rank
    and after a requeue: `slurm-<SLURM_JOB_ID>`, `torchrun-<--rdzv-id>` (torchrun's default
    id "none" is no id), `submitit-<id>` for submitit's local executor; None outside a job."""
    candidates = (
        ("slurm", os.environ.get("SLURM_JOB_ID")),
        ("submitit", os.environ.get("SUBMITIT_LOCAL_JOB_ID")),
        ("torchrun", os.environ.get("TORCHELASTIC_RUN_ID")),
    )
    for kind, value in candidates:
        if value and value != "none":
            return f"{kind}-{re.sub(r'[^A-Za-z0-9_.-]', '_', value)}"
    return None


def job_run_dir(log_dir, task_name) -> Path | None:
    """The run dir of a single run started by a scheduler job (None outside one, or once that
    run has finished): every node's processes and the requeued job choose the same one."""
    job = cluster_job()
    if job is None:
        return None
    path = Path(log_dir) / str(task_name) / "runs" / job
    return None if (path / FINISHED).is_file() else path


def mark_job(output_dir) -> None:
    """Record the scheduler job in its run dir (rank 0), which `requeued_checkpoint` reads."""
    job = cluster_job()
    if job is not None and rank() == 0:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / JOB_FILE).write_text(job + "\n")


def requeued_checkpoint(output_dir) -> Path | None:
    """last.ckpt of this run dir when this process is the same scheduler job restarted
    (requeued after preemption or a time limit, or resubmitted by submitit): the dir holds
    this job's id and an unfinished last.ckpt. None otherwise."""
    job = cluster_job()
    if job is None or output_dir is None:  # not a scheduler job, or no run dir (composed only)
        return None
    marker = Path(output_dir) / JOB_FILE
    if not marker.is_file() or marker.read_text().strip() != job:
        return None
    return _unfinished(output_dir)


def swept_checkpoint(output_dir) -> Path | None:
    """last.ckpt of this run dir when a resumed grid sweep runs this job again in it
    (`LITLAB_SWEEP_RESUME=1`, set for the job by litlab.sweeps.grid) and it did not finish."""
    if os.environ.get("LITLAB_SWEEP_RESUME") != "1" or output_dir is None:
        return None
    return _unfinished(output_dir)


def _unfinished(run_dir) -> Path | None:
    """The run dir's last.ckpt, unless there is none or the run finished."""
    last = checkpoint_of(run_dir)
    return last if last.is_file() and not (Path(run_dir) / FINISHED).is_file() else None


def checkpoint_of(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "last.ckpt"


#: what a resumed run must share with this command besides each node's class: the model's net
#: (not the optimizer or schedule, which a resume may change), the data's set name
IDENTITY = {"model": "net", "data": "name"}


def _identity(key: str, node) -> dict:
    if node is None:
        return {}
    plain = OmegaConf.to_container(node, resolve=False) if not isinstance(node, dict) else node
    return {"_target_": plain.get("_target_"), IDENTITY[key]: plain.get(IDENTITY[key])}


def _short(value) -> str:
    text = str(value.rsplit(".", 1)[-1] if isinstance(value, str) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def why_not(run: Path, model=None, data=None) -> str | None:
    """None when `run` trained this model on this data (or there is nothing to compare: no
    composed model/data, or a run dir without its .hydra/config.yaml, whose checkpoint's own
    stored config is checked when it loads), else why not, in a few words."""
    if model is None and data is None:
        return None
    path = Path(run) / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    stored = OmegaConf.load(path)
    for key, mine in (("model", model), ("data", data)):
        if mine is None:
            continue
        ours, theirs = _identity(key, mine), _identity(key, stored.get(key))
        if ours == theirs:
            continue
        if ours.get("_target_") != theirs.get("_target_"):
            return f"{key} {_short(theirs.get('_target_'))}, not {_short(ours.get('_target_'))}"
        sub = IDENTITY[key]
        a, b = ours.get(sub) or {}, theirs.get(sub) or {}
        if isinstance(a, dict) and isinstance(b, dict):
            k = next(k for k in sorted({*a, *b}) if a.get(k) != b.get(k))
            return f"{key}.{sub}.{k}={_short(b.get(k))}, not {_short(a.get(k))}"
        return f"{key}.{sub}={_short(b)}, not {_short(a)}"
    return None


def resumable_runs(log_dir: Path, task_name: str) -> list[Path]:
    """Run dirs of the task holding a last.ckpt, newest first (timestamps sort)."""
    runs = (Path(log_dir) / task_name / "runs").glob("*")
    return sorted((p for p in runs if checkpoint_of(p).is_file()), reverse=True)


def run_to_resume(ckpt_path, log_dir, task_name, model=None, data=None) -> Path | None:
    """The run dir that `ckpt_path` names, else None: for `last`, the newest run dir of the task
    with a last.ckpt that this model and data can resume."""
    if ckpt_path is None or _names_nothing(ckpt_path):  # not the working directory
        return None
    value = str(ckpt_path)
    if value == LAST:
        runs = resumable_runs(Path(log_dir), str(task_name))
        return next((p for p in runs if why_not(p, model, data) is None), None)
    path = Path(value)
    return path.resolve() if path.is_dir() and checkpoint_of(path).is_file() else None


def _run_dir(ckpt_path, log_dir, task_name, new_dir, model=None, data=None) -> str:
    resumed = run_to_resume(ckpt_path, log_dir, task_name, model, data)
    return str(resumed or job_run_dir(log_dir, task_name) or new_dir)


def _output_subdir(ckpt_path, log_dir, task_name, model=None, data=None) -> str | None:
    """.hydra of a new run; .hydra/resume-<time> of a resumed one; none on ranks > 0 of a job
    (rank 0 writes the run's config once)."""
    if rank() > 0:
        return None
    job_dir = job_run_dir(log_dir, task_name)
    job_started = job_dir is not None and (job_dir / ".hydra").is_dir()
    if not job_started and run_to_resume(ckpt_path, log_dir, task_name, model, data) is None:
        return ".hydra"
    return f".hydra/resume-{time.strftime('%Y-%m-%d_%H-%M-%S')}"


def resolve_checkpoint(cfg) -> None:
    """Sets `cfg.ckpt_path` to the file it names: last.ckpt of the run that `last` or a run dir
    names; a file (or None) stays. One line when `last` finds no run or a folder is not a run.
    A restarted scheduler job, or a job of a resumed grid sweep, continues its own last.ckpt
    whatever ckpt_path says (the first run may have started from a file)."""
    cfg.ckpt_path = _checkpoint_file(
        cfg.get("ckpt_path"), cfg.paths.log_dir, cfg.task_name, cfg.get("model"), cfg.get("data")
    )
    requeued = requeued_checkpoint(cfg.paths.output_dir) or swept_checkpoint(cfg.paths.output_dir)
    if requeued is not None and (
        cfg.ckpt_path is None or Path(str(cfg.ckpt_path)).resolve() != requeued.resolve()
    ):
        if rank() == 0:
            restart = os.environ.get("SLURM_RESTART_COUNT")
            again = f" (restart {restart})" if restart else ""
            who = cluster_job() or "sweep job"
            print(f"{who}{again}: resuming {requeued.parent.parent} from last.ckpt", flush=True)
        cfg.ckpt_path = str(requeued)
    mark_job(cfg.paths.output_dir)


def _names_nothing(ckpt_path) -> bool:
    """`ckpt_path=` (Hydra's empty string) or blanks: as a path, `Path("")` is the working
    directory, which the user never named (and which may even be a run dir)."""
    return not str(ckpt_path).strip()


def refuse_empty(ckpt_path) -> None:
    """One line for a `ckpt_path` that names nothing, before it is read as a folder."""
    if ckpt_path is not None and _names_nothing(ckpt_path):
        raise UserError(
            "ckpt_path= is empty; pass a .ckpt file, a run dir of train.py or last "
            "(train.py without a checkpoint: leave ckpt_path out)"
        )


def _checkpoint_file(ckpt_path, log_dir, task_name, model=None, data=None):
    from litlab.utils.distributed import is_rank_zero

    if ckpt_path is None:
        return None
    refuse_empty(ckpt_path)
    value = str(ckpt_path)
    run = run_to_resume(value, log_dir, task_name, model, data)

    def passed_over() -> str:  # the newest runs `last` did not take, and why
        newer = itertools.takewhile(lambda p: p != run, resumable_runs(log_dir, task_name))
        return ", ".join([f"{p.name} ({why_not(p, model, data)})" for p in newer][:3])

    if run is None and value == LAST:
        runs = Path(log_dir) / str(task_name) / "runs"
        rejected = passed_over()
        seen = f"; newest rejected: {rejected}" if rejected else ""
        raise UserError(
            f"ckpt_path=last: no run of task '{task_name}' in {runs} with checkpoints/last.ckpt "
            f"that this command's model and data can resume{seen}; pass its overrides, or "
            f"ckpt_path=<run dir or .ckpt file>"
        )
    if run is None and Path(value).is_dir():
        raise UserError(
            f"ckpt_path={value} is a folder without checkpoints/last.ckpt; "
            f"pass a run dir of train.py or a .ckpt file"
        )
    if run is None:
        return ckpt_path
    if is_rank_zero():  # DDP ranks > 0 resolve it alike, silently
        skipped = passed_over() if value == LAST else ""
        note = f"; skipped newer runs of other settings: {skipped}" if skipped else ""
        print(f"resuming {run} from {checkpoint_of(run).name}{note}", flush=True)
    return str(checkpoint_of(run))


def refuse_in_multirun(config_name: str, args: list[str]) -> None:
    """Every job of a sweep would resume (and write into) the same run: refused upfront."""
    if config_name not in RESUMABLE_CONFIGS or not any(a in ("-m", "--multirun") for a in args):
        return
    for value in (a.split("=", 1)[1].strip("'\"") for a in args if a.startswith("ckpt_path=")):
        if value == LAST or (not _names_nothing(value) and Path(value).is_dir()):
            raise UserError(
                f"ckpt_path={value} cannot be used with -m: every job of a sweep "
                f"would resume the same run; resume each job on its own "
                f"(python src/train.py ckpt_path=<its run dir>), or pass a .ckpt file"
            )


OmegaConf.register_new_resolver("resume_run_dir", _run_dir, replace=True)
OmegaConf.register_new_resolver("resume_output_subdir", _output_subdir, replace=True)


# ---------------------------------------------------------- run settings
GONE = object()  # a key the stored run does not have


def explicit_keys() -> list[tuple[str, ...]] | None:
    """The config paths this command's overrides set (`model=gnn` -> ('model',),
    `federate/strategy=fedprox` -> ('federate', 'strategy'), `x@a.b=c` -> ('a', 'b'));
    `()` for a global group (`experiment=...`): it may set any key. None without Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    keys = []
    for text in HydraConfig.get().overrides.task:
        key = str(text).split("=", 1)[0].lstrip("+~").split("@", 1)[-1]  # `x@a.b`: a.b
        path = tuple(key.replace("/", ".").split("."))
        keys.append(() if path[0] == "experiment" else path)
    return keys


def _where(path: tuple) -> bool:
    """A key that says where things are (a folder, a file), not what is computed."""
    last = str(path[-1]) if path else ""
    return last.endswith(("_dir", "_file")) or last == "dirpath"


def differences(stored, current, path: tuple = ()):
    """Paths of the leaves (scalars, lists, whole subtrees one side lacks) that differ."""
    if isinstance(stored, dict) and isinstance(current, dict):
        for key in sorted(set(stored) | set(current), key=str):
            yield from differences(stored.get(key, GONE), current.get(key, GONE), (*path, key))
    elif isinstance(stored, dict) and current in (None, GONE):
        if not stored:
            yield path
        for key in sorted(stored, key=str):
            yield from differences(stored[key], GONE, (*path, key))
    elif stored != current:
        yield path


def _at(config, path: tuple):
    for key in path:
        config = config.get(key, GONE) if isinstance(config, dict) else GONE
    return config


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def _covered(path: tuple, explicit) -> bool:
    if explicit is None:  # no command line known (the Python API): all of it was given
        return True
    return any(path[: len(k)] == k or k[: len(path)] == path for k in explicit)


def _shown(value) -> str:
    return "absent" if value is GONE else trust.shown(value)


def _same_shape(path: tuple, theirs, ours, source: str) -> None:
    """A mapping of this command's config is a mapping in the run's file too (a list or a
    number there is a damaged or crafted file, not a setting)."""
    if isinstance(ours, dict) and not isinstance(theirs, dict) and theirs not in (GONE, None):
        raise trust.untrusted_refusal(
            source, f"has {dotted(path)} of type {type(theirs).__name__}, not a mapping"
        )


def _check_target(path: tuple, value, targets: dict, source: str) -> None:
    """A `_target_` taken from the file: only the kind the recipe builds at that node."""
    if not path or path[-1] != "_target_" or path[0] in ("data", "model"):
        return  # data and model targets: trust.check_is_data has checked them where they sit
    kinds = targets.get(dotted(path[:-1]))
    why = "is not built from a resumed run's file" if kinds is None else None
    if why is None:
        why = trust.target_refusal(value, kinds, ())
    if why is not None:
        raise trust.untrusted_refusal(
            source, f"names {dotted(path)}={trust.shown(value)}, which {why}"
        )


def _no_nested_target(path: tuple, value, source: str) -> None:
    """A list or subtree taken whole from the file holds no `_target_` outside data and model
    (trust.check_is_data has checked those): nothing else it names is built."""
    if path[0] in ("data", "model") or not isinstance(value, list | dict):
        return
    nodes = (node for _, node, _ in trust.config_nodes(value))
    if any(isinstance(node, dict) and "_target_" in node for node in nodes):
        raise trust.untrusted_refusal(
            source,
            f"names a _target_ in {dotted(path)}, which is not built from a resumed run's file",
        )


def _set(cfg, path: tuple, value) -> None:
    from omegaconf import DictConfig, open_dict

    node = cfg
    with open_dict(cfg):
        for key in path[:-1]:
            if not isinstance(node.get(key), DictConfig):
                node[key] = {}
            node = node[key]
        if value is GONE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value


def adopt(cfg, stored: dict, source: str, roots, targets: dict, free=(), started="") -> list:
    """Set in `cfg` every value of `stored` under `roots` that differs and this command does
    not set; refuse one it sets differently, and any difference outside `roots` and `free`
    (paths: key tuples). `stored` passed `trust.check_is_data` (plain data). Returns the adopted
    keys, dotted."""
    from omegaconf import OmegaConf

    current = {}  # the free keys are not resolved (compress's callbacks need the run view)
    for key in cfg:
        if (key,) not in free:
            value = cfg[key]
            is_node = OmegaConf.is_config(value)
            current[key] = OmegaConf.to_container(value, resolve=True) if is_node else value
    explicit = explicit_keys()
    found = [
        p for p in differences(stored, current) if p and not any(p[: len(f)] == f for f in free)
    ]
    adopted = []
    for path in found:
        theirs, ours = _at(stored, path), _at(current, path)
        if _where(path) and (path[0] != "data" or _covered(path, explicit)):
            continue  # where things are: this command's (data folders: see data_folders)
        if path[0] in roots and not _covered(path, explicit):
            _same_shape(path, theirs, ours, source)
            adopted.append(path)
            continue
        hint = (
            f"drop {dotted(path)}=... to continue with the run's own"
            if path[0] in roots
            else "resume with the run's own settings"
        )
        raise UserError(
            f"ckpt_path: {dotted(path)} is {_shown(theirs)} in the run to resume, "
            f"{_shown(ours)} here; {hint}{started}"
        )
    for path in adopted:
        _check_target(path, _at(stored, path), targets, source)
        _no_nested_target(path, _at(stored, path), source)
    for path in adopted:
        _set(cfg, path, _at(stored, path))
    return [dotted(p) for p in adopted]
