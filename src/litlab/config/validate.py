"""Checks a composed config before any data is loaded or any model built: bad input costs one
line (key, bad value, what is valid) and exit 2, in seconds, before anything is printed. Every
entry point goes through here once, by one mechanism:
- an entry point's own keys (seed, ckpt_path, export's rtol, serve's port, federate.*) are a
  pydantic model declared where the setting lives (`config.settings`): types, bounds, Literal
  choices, unknown keys, rules across keys and the files they name;
- every node with a `_target_` against its target's signature (`config.targets`);
- the Trainer against the hardware present (`config.trainer_checks`);
- across groups (`config.checks`): the monitored metric is one the model logs, folders and
  checkpoint files, model/data task mismatch, data overrides against a checkpoint's data.
Only targets are imported (torch and lightning are, no data is read).
"""

from typing import Annotated, Literal

import annotated_types as at
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError
from pydantic import ConfigDict

from litlab.bounds import Seed
from litlab.config import required, targets
from litlab.config.checks import check_checkpoint, check_monitor, check_paths, check_run
from litlab.config.federate_settings import FederateSettings
from litlab.config.settings import Settings, check
from litlab.config.trainer_checks import check_trainer, check_trainer_plain
from litlab.errors import UserError, one_line

#: how to fill a required key, by name
HINTS = {
    "ckpt_path": "=logs/train/runs/<run>/checkpoints/<file>.ckpt",
    "model_path": "=logs/export/runs/<run>/model.onnx (or a .ckpt from src/train.py)",
}
#: groups checked by their targets' signatures, not by an entry point's settings model
GROUPS = ("trainer", "callbacks", "logger", "model", "data", "paths", "extras")
#: how long DDP processes wait for each other to join (runs/ddp_join): up to a day
JoinSeconds = Annotated[float, at.Interval(gt=0, le=86400), "seconds in (0, 86400]"]


class TrainKeys(Settings):
    """train.py's own top-level keys (Hydra refuses unknown ones itself)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    seed: Seed
    train: bool = True
    test: bool = True
    ckpt_path: str | None = None
    task_name: str = "train"
    ddp_join_timeout: JoinSeconds = 300


class EvalKeys(Settings):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    split: Literal["test", "val"] = "test"
    predictions: bool = True
    ckpt_path: str
    trust_checkpoint: bool = False


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
        raise UserError(
            f"{err.full_key} reads {gone}, which is not in the config (deleted with ~{gone}?): "
            f"keep {gone}, or set {err.full_key} to a value"
        ) from None
    except Exception as err:
        raise UserError(f"the config does not resolve: {one_line(err)}") from None


def _trainer(t: dict) -> None:
    check_trainer_plain(t)  # first the checks that import nothing
    targets.walk_plain("trainer", t)
    targets.walk("trainer", t)
    check_trainer(t)


def _model_and_data_plain(cfg: DictConfig) -> None:
    """Model against data, from the classes' declarations: no torch, about a second."""
    from litlab.config.build import check_compatible

    check_compatible(cfg)


def _model_and_data(c: dict) -> None:
    targets.check_optimizer(c["model"])
    check_paths(c["data"])
    check_monitor(c)


def _groups(cfg: DictConfig, c: dict, own: str | None = None) -> None:
    """trainer, model, data and the other groups of a training run: what imports nothing
    first, then the targets by their signatures (`own`: the entry point's own node, skipped)."""
    check_trainer_plain(c["trainer"])
    targets.walk_plain("trainer", c["trainer"])  # first: other groups interpolate trainer keys
    targets.walk_plain("", c)
    _model_and_data_plain(cfg)
    targets.walk("trainer", c["trainer"])
    check_trainer(c["trainer"])
    targets.walk("", {k: v for k, v in c.items() if k not in ("trainer", own)})
    _model_and_data(c)


def train_config(cfg: DictConfig) -> None:
    """Everything train.py needs, checked in about a second."""
    required.check(cfg, "train")
    _missing(cfg)
    c = _container(cfg)
    check(TrainKeys, c)
    if c.get("ckpt_path") is not None:
        check_checkpoint_exists(c["ckpt_path"])
    check_run(c)
    _groups(cfg, c)
    if c.get("ckpt_path"):
        check_checkpoint(c["ckpt_path"], c["model"])


class FederateKeys(Settings):
    """federate.py's top-level keys besides the groups, `federate.*` among them
    (`litlab.config.federate_settings`)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    federate: FederateSettings = FederateSettings()
    seed: Seed = 42
    ckpt_path: str | None = None
    task_name: str
    optimized_metric: Literal["test/acc", "test/loss", "federate/bytes_per_round"] | None = (
        "test/acc"
    )


def federate_config(cfg: DictConfig) -> FederateKeys:
    """federate.py's own keys (`federate.*` among them), data, model, clients' trainer and
    Flower strategy, before any data is read or Ray starts (`federate.local_epochs=auto`
    resolved first: `federate_settings.resolve_auto`)."""
    required.check(cfg, "federate")
    _missing(cfg)
    c = _container(cfg)
    keys = check(FederateKeys, c)
    _groups(cfg, c, own="federate")
    targets.walk("federate.strategy", c["federate"]["strategy"])
    return keys


def trainer_config(cfg: DictConfig) -> None:
    """A DDP trainer alone, before its ranks start: a bad trainer.devices fails at once, not
    after every rank has imported torch (other trainers are checked by train_config)."""
    try:
        trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    except Exception:
        return
    strategy = trainer.get("strategy") if isinstance(trainer, dict) else None
    target = strategy.get("_target_", "") if isinstance(strategy, dict) else str(strategy)
    if "ddp" in target.lower():
        _trainer(trainer)


def eval_config(cfg: DictConfig) -> None:
    required.check(cfg, "eval")
    _missing(cfg)
    c = _container(cfg)
    keys = check(EvalKeys, c)
    check_checkpoint_exists(keys.ckpt_path)
    _trainer(c["trainer"])
    targets.walk_plain("", c)
    targets.walk("", {k: v for k, v in c.items() if k not in ("trainer", "data_overrides")})
    check_checkpoint(keys.ckpt_path, None, keys.trust_checkpoint, c.get("data_overrides"))
    check_data_overrides(keys.ckpt_path, c.get("data_overrides"))


def entry_config(cfg: DictConfig, settings: type[Settings], entry: str = "entry"):
    """An entry point's whole config: first its own keys as `settings` (returned, typed); then
    the config the run will see (`Settings.run_view`): model against data and the settings
    against the data's task kind (no torch yet), the groups with targets by their signatures,
    and last the files the settings name. Once per run, before any data is read or anything
    printed."""
    required.check(cfg, entry)  # `entry`: a key of required.REQUIRED
    own_keys = [k for k in cfg if k not in (*GROUPS, "hydra")]
    _missing(cfg, own_keys)
    own = check(settings, _container(cfg, own_keys))
    try:  # the trainer's plain bounds before the run view (which may read a checkpoint)
        trainer = _container(cfg, ["trainer"]).get("trainer")
    except UserError:  # it interpolates what the run view adds: checked below
        trainer = None
    if isinstance(trainer, dict):
        check_trainer_plain(trainer)
        targets.walk_plain("trainer", trainer)
    cfg = own.run_view(cfg)
    _missing(cfg)
    c = _container(cfg)
    targets.walk_plain("", c)
    if isinstance(c.get("model"), dict) and isinstance(c.get("data"), dict):
        from litlab.tasks import kind_of_data

        _model_and_data_plain(cfg)
        own.check_kind(kind_of_data(c["data"]["_target_"]))
    if isinstance(c.get("trainer"), dict):
        _trainer(c["trainer"])
    targets.walk("", {k: v for k, v in c.items() if k not in ("trainer", "data_overrides")})
    if isinstance(c.get("model"), dict) and isinstance(c.get("data"), dict):
        _model_and_data(c)
    own.check_files()
    return own


def job_config(config_name: str, cfg: DictConfig) -> None:
    """One job of a sweep, checked before the sweep's first job starts (runs/sweep_check):
    as its entry point checks it, and its `threads` (applied when the job starts). Entry points
    after training check their own settings when they start; their groups are checked here."""
    from litlab import threads

    checks = {"train": train_config, "eval": eval_config, "federate": _federate_job}
    required.check(cfg, config_name if config_name in required.REQUIRED else "entry")
    threads.check(cfg.get("threads", "auto"))
    if config_name in checks:
        return checks[config_name](cfg)
    groups = [k for k in GROUPS if k in cfg]
    _missing(cfg, groups)
    c = _container(cfg, groups)
    if isinstance(c.get("trainer"), dict):
        _trainer(c["trainer"])
    targets.walk_plain("", c)
    targets.walk("", {k: v for k, v in c.items() if k != "trainer"})


def _federate_job(cfg: DictConfig) -> None:
    """As federate.py checks a job when it starts (`federated.recipe.check`): its `auto` client
    epochs resolved (the trainer's max_epochs interpolates them), then its settings, data,
    model, trainer and strategy."""
    from litlab.config import federate_settings

    federate_settings.resolve_auto(cfg)
    federate_config(cfg)


def check_checkpoint_exists(path) -> None:
    """Before torch is imported: the file is there."""
    from pathlib import Path

    if not Path(str(path)).exists():
        raise UserError(f"ckpt_path={path}: no such checkpoint file")


def check_data_overrides(ckpt_path, overrides: dict | None, key: str = "data_overrides") -> None:
    """`data_overrides` against the data config stored in the checkpoint: keys the datamodule
    takes, values of its parameters' types and bounds (a batch size of 0 fails here, not in
    the loader)."""
    if not overrides:
        return
    if "_target_" in overrides:
        raise UserError(
            f"{key}._target_: overrides change the stored data's settings, not its class "
            "(the model was trained on it); export or evaluate the run as trained"
        )
    from litlab.checkpointing.load import load
    from litlab.checkpointing.run_config import CONFIG_KEY

    stored = load(ckpt_path, mmap=True)[CONFIG_KEY].get("data") or {}
    merged = OmegaConf.merge(stored, overrides)
    targets.check_node(key, OmegaConf.to_container(merged, resolve=True))
