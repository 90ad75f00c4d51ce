"""Checks a composed config before any data is loaded or any model built: bad input costs one
line (key, bad value, what is valid) and exit 2, in seconds, before anything is printed. Every
entry point (train, eval, export, serve, compress, federate, report) goes through
`entry_config` once, in the same order:

1. the nodes the entry point builds from are there (`config.required`), no key left `???`;
2. its own keys as its settings model (pydantic: types, bounds, Literal choices, unknown keys
   with the closest valid one, rules across its keys): `config.entries` for train, eval and
   federate, beside their code for the others;
3. the config the run will see (`Settings.run_view`: compress joins the checkpoint's model and
   data), first what needs no import (about a second in all): the bounds known by a
   target's name, model against data by their declared kinds, the Trainer against what
   this machine certainly lacks (a GPU, fp16 on a CPU: `trainer_checks.check_impossible_here`),
   the files the settings name there (`Settings.check_files_exist`); then every node with a
   `_target_` against its imported target's signature (`config.targets`);
4. the rules across groups (`config.checks`: the optimizer builds, folders exist, the
   monitored metric is logged; the settings' `check_groups`);
5. the Trainer against the hardware present (`config.trainer_checks`);
6. the files and resources the settings name (`Settings.check_files`).
"""

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError

from litlab.config import required, targets
from litlab.config.checks import check_monitor, check_paths
from litlab.config.entries import BY_ENTRY
from litlab.config.settings import Settings, check
from litlab.config.trainer_checks import check_impossible_here, check_trainer
from litlab.errors import UserError, one_line

#: how to fill a required key, by name
HINTS = {
    "ckpt_path": "=logs/train/runs/<run>/checkpoints/<file>.ckpt",
    "model_path": "=logs/export/runs/<run>/model.onnx (or a .ckpt from src/train.py)",
}
#: groups checked by their targets' signatures, not by an entry point's settings model
GROUPS = ("trainer", "callbacks", "logger", "model", "data", "paths", "extras")


class ReadButDeleted(UserError):
    """A key the config reads (`${seed}`) was deleted (`~seed`)."""

    def __init__(self, message: str, gone: str):
        super().__init__(message)
        self.gone = gone


def _missing(cfg: DictConfig, keys=None) -> None:
    """A required key (`???`) left unset: one line saying how to set it."""
    missing = []
    for k in [k for k in cfg if k != "hydra"] if keys is None else keys:
        if OmegaConf.is_missing(cfg, k):
            missing.append(k)
        elif OmegaConf.is_interpolation(cfg, k):
            continue  # resolved (and a deleted key it reads named) by `_container`
        elif OmegaConf.is_config(cfg[k]):
            try:
                missing += [f"{k}.{sub}" for sub in OmegaConf.missing_keys(cfg[k])]
            except InterpolationKeyError:
                continue  # named by `_container`, which resolves the node
    missing.sort()
    if missing:
        key = missing[0]
        raise UserError(f"{key} is required: add {key}{HINTS.get(key, '=VALUE')} to the command")


def _container(cfg: DictConfig, keys=None) -> dict:
    """The config (or its `keys`) as plain dicts, resolved (the unresolved one kept for
    messages)."""
    keys = [k for k in cfg if k != "hydra"] if keys is None else [k for k in keys if k in cfg]

    def plain(resolve: bool) -> dict:
        return {
            k: OmegaConf.to_container(cfg[k], resolve=resolve)
            if OmegaConf.is_config(cfg[k])
            else cfg[k]
            for k in keys
        }

    try:
        targets.remember_raw(plain(resolve=False))
        return plain(resolve=True)
    except InterpolationKeyError as err:  # `~model.monitor`: a key others read is gone
        gone = str(err).split("'")[1] if str(err).count("'") >= 2 else "a key"
        raise ReadButDeleted(
            f"{err.full_key} reads {gone}, which is not in the config (deleted with ~{gone}?): "
            f"keep {gone}, or set {err.full_key} to a value",
            gone,
        ) from None
    except Exception as err:
        raise UserError(f"the config does not resolve: {one_line(err)}") from None


def entry_config(cfg: DictConfig, settings: type[Settings], entry: str = "entry"):
    """An entry point's whole config, in the order of this module's docstring; returns its own
    keys as `settings` (typed). Once per run, before any data is read or anything printed (a
    resume checks again with the run's own settings taken in, to say which are the file's).
    `entry`: a key of `required.REQUIRED`."""
    required.check(cfg, entry)
    if "data_overrides" in settings.model_fields:
        _no_rebuilt_groups(cfg)
    own_keys = [k for k in cfg if k not in (*GROUPS, "hydra")]
    _missing(cfg, own_keys)
    try:
        own = check(settings, _container(cfg, own_keys))
    except UserError:
        _read_but_deleted(cfg, settings)  # `~seed`: who reads it says more than "required"
        raise
    cfg = own.run_view(cfg)
    _missing(cfg)
    c = _container(cfg)
    built = isinstance(c.get("model"), dict) and isinstance(c.get("data"), dict)
    targets.walk_plain("", c)  # what a target's name tells: no import, about a second
    if built:
        from litlab.config.build import check_compatible
        from litlab.tasks import kind_of_data

        check_compatible(cfg)  # model against data by their declared kinds: no torch
        own.check_kind(kind_of_data(c["data"]["_target_"]))
    if isinstance(c.get("trainer"), dict):
        check_impossible_here(c["trainer"])
    own.check_files_exist()
    # every target imported from here on: torch and Lightning (seconds)
    targets.walk("", {k: v for k, v in c.items() if k != "data_overrides"})
    if built:
        targets.check_optimizer(c["model"])
        check_paths(c["data"])
        check_monitor(c)
    own.check_groups(c)
    if isinstance(c.get("trainer"), dict):
        check_trainer(c["trainer"])
    own.check_files()
    return own


def _no_rebuilt_groups(cfg: DictConfig) -> None:
    """A command that rebuilds its run from a checkpoint refuses `+data.*`/`+model.*` on its
    command line (Hydra adds them; nothing would read them) in one line saying how to change
    the data (`data_overrides`). A `data` node from a config file (configs/local) is left."""
    from hydra.core.hydra_config import HydraConfig

    from litlab.config.checks import REBUILT, rebuilt_group_refusal

    if not any(group in cfg for group in REBUILT):
        return
    if not HydraConfig.initialized():  # a composed config handed to a recipe: no command line
        group = next(g for g in REBUILT if g in cfg)
        raise UserError(rebuilt_group_refusal(f"{group}=...") or group)
    hydra = HydraConfig.get()
    for override in hydra.overrides.task:
        line = rebuilt_group_refusal(str(override), hydra.job.config_name or "")
        if line:
            raise UserError(line)


def _read_but_deleted(cfg: DictConfig, settings: type[Settings]) -> None:
    """One of the entry point's own keys was deleted and another key reads it: say which."""
    try:
        _container(cfg)
    except ReadButDeleted as err:
        if err.gone in settings.model_fields:
            raise
    except UserError:
        return  # keys the run view adds (compress): checked after it


def job_config(config_name: str, cfg: DictConfig) -> None:
    """One job of a sweep, checked before the sweep's first job starts (runs/sweep_check):
    as its entry point checks it, and its `threads` (applied when the job starts). Entry points
    after training check their own settings when they start; their groups are checked here."""
    from litlab import threads

    entry = config_name if config_name in required.REQUIRED else "entry"
    required.check(cfg, entry)
    threads.check(cfg.get("threads", "auto"))
    if config_name == "federate":  # as federate.py: `auto` client epochs resolved first
        from litlab.config import federate_settings

        federate_settings.resolve_auto(cfg)
    if config_name in BY_ENTRY:
        entry_config(cfg, BY_ENTRY[config_name], entry)
        return
    groups = [k for k in GROUPS if k in cfg]
    _missing(cfg, groups)
    c = _container(cfg, groups)
    targets.walk_plain("", c)
    targets.walk("", c)
    if isinstance(c.get("trainer"), dict):
        check_trainer(c["trainer"])
