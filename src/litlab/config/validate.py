"""The one check of a composed config, before any data is read or anything printed: bad input
costs one line (every error found, the first as it would read alone) and exit 2, in seconds.
Every entry point (train, eval, export, serve, compress, federate, report) and every job of a
sweep (runs/sweep_dir) goes through `check`, in this order; a stage runs when the ones
before it found nothing:

1. the nodes the entry point builds from are there (`rules.check_required`), `threads`, no
   key left `???`;
2. what needs no import (about a second): its own keys as its settings model
   (`config.entries`); what a target's name tells (`config.models.EXTERNAL`); model against data by
   their declared kinds; the Trainer against what this machine certainly lacks (a GPU, fp16
   on a CPU); the files the settings name are there (`check_files_exist`);
3. every `_target_` node as its target's model (`config.models.node_model`: the target is
   imported), then its `check_settings`;
4. the rules across groups (the optimizer builds, folders exist, the monitored metric is
   logged, the settings' `check_groups`) and the Trainer against this machine;
5. the files and resources the settings name (`check_files`).
"""

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError

from litlab.config import rules
from litlab.config.checkpoints import refuse_rebuilt_groups
from litlab.config.entries import ENTRIES, OwnKeys, SearchSettings, SweepSummarySettings
from litlab.config.messages import refuse, validated
from litlab.config.rules import stages
from litlab.errors import UserError, one_line

#: how to fill a required key, by name
HINTS = {
    "ckpt_path": "=logs/train/runs/<run>/checkpoints/<file>.ckpt",
    "model_path": "=logs/export/runs/<run>/model.onnx (or a .ckpt from src/train.py)",
}
SUMMARY = "hydra.callbacks.sweep_summary"
#: groups judged by their targets' models, not by an entry point's settings model
GROUPS = ("trainer", "callbacks", "logger", "model", "data", "paths", "extras")


class ReadButDeleted(UserError):
    """A key the config reads (`${seed}`) was deleted (`~seed`)."""

    def __init__(self, message: str, gone: str):
        super().__init__(message)
        self.gone = gone


def check(cfg: DictConfig, entry: str = "entry", imports: bool = True):
    """`cfg` checked in the order of this module's docstring; returns the entry point's own
    keys, typed. `entry`: configs/<entry>.yaml's name. `imports=False`: stages 1 and 2 only
    (what needs no import), as a sweep judges all its jobs before any job's imports."""
    from litlab import threads

    model = ENTRIES.get(entry, OwnKeys)
    rules.check_required(cfg, entry)
    if "data_overrides" in model.model_fields:  # the run is rebuilt from a checkpoint
        refuse_rebuilt_groups(cfg)
    model.prepare(cfg)
    if "threads" not in model.model_fields:  # torch's threads (serve's are ONNX Runtime's)
        threads.check_threads(cfg.get("threads", "auto"))
    own_keys = [k for k in cfg if k not in (*GROUPS, "hydra") or k in model.model_fields]
    refuse(_missing(cfg, own_keys))
    raw, plain = _container(cfg, own_keys)
    own, errors = validated(model, plain, raw=raw)
    if own is None:
        _read_but_deleted(cfg, model)
    try:
        view = own.run_view(cfg) if own is not None else cfg
        refuse(_missing(view))
        raw, c = _container(view)
    except UserError:
        refuse(errors)  # the run view needs valid settings: theirs first
        raise
    for stage in stages(view, c, raw, own):
        refuse(errors + stage)
        if not imports:
            break
    return own


def _missing(cfg: DictConfig, keys=None) -> list[str]:
    """A required key (`???`) left unset: how to set it."""
    missing = []
    for k in [k for k in cfg if k != "hydra"] if keys is None else keys:
        if OmegaConf.is_missing(cfg, k):
            missing.append(k)
        elif not OmegaConf.is_interpolation(cfg, k) and OmegaConf.is_config(cfg[k]):
            try:  # (an interpolation is resolved, a deleted key it reads named, by _container)
                missing += [f"{k}.{sub}" for sub in OmegaConf.missing_keys(cfg[k])]
            except InterpolationKeyError:
                continue
    return [
        f"{k} is required: add {k}{HINTS.get(k, '=VALUE')} to the command" for k in sorted(missing)
    ]


def _container(cfg: DictConfig, keys=None) -> tuple[dict, dict]:
    """(unresolved, resolved) plain dicts of the config (or its `keys`)."""
    keys = [k for k in cfg if k != "hydra"] if keys is None else [k for k in keys if k in cfg]

    def plain(resolve: bool) -> dict:
        return {
            k: OmegaConf.to_container(cfg[k], resolve=resolve)
            if OmegaConf.is_config(cfg[k])
            else cfg[k]
            for k in keys
        }

    try:
        return plain(resolve=False), plain(resolve=True)
    except InterpolationKeyError as err:  # `~model.monitor`: a key others read is gone
        gone = str(err).split("'")[1] if str(err).count("'") >= 2 else "a key"
        raise ReadButDeleted(
            f"{err.full_key} reads {gone}, which is not in the config (deleted with ~{gone}?): "
            f"keep {gone}, or set {err.full_key} to a value",
            gone,
        ) from None
    except Exception as err:
        raise UserError(f"the config does not resolve: {one_line(err)}") from None


def _read_but_deleted(cfg: DictConfig, model) -> None:
    """One of the entry point's own keys was deleted and another key reads it: say which."""
    try:
        _container(cfg)
    except ReadButDeleted as err:
        if err.gone in model.model_fields:
            raise
    except UserError:
        return  # keys the run view adds (compress): checked after it


def check_summary(config: DictConfig) -> None:
    """The sweep summary's settings (`SUMMARY`), when a sweep starts, before any job."""
    node = OmegaConf.select(config, SUMMARY, default=None)
    if node is not None:  # a mapping: Hydra refuses others first
        values = OmegaConf.to_container(node, resolve=True)
        values.pop("_target_", None)
        refuse(validated(SweepSummarySettings, values, SUMMARY)[1])


def check_search(config: DictConfig) -> None:
    """A search's own settings (`hydra.sweeper` of litlab's Optuna sweeper), before its folder."""
    values = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
    values.pop("_target_", None)
    refuse(validated(SearchSettings, values, "hydra.sweeper")[1])
