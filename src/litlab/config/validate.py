"""Checks a composed config before any data is loaded or any model built: bad input costs one
line (key, bad value, what is valid) and exit 2, in seconds, before anything is printed.

Generic on purpose, so every domain's configs are covered without lists per key name:
- every node with a `_target_` is checked against its target (`config.signatures`): unknown
  keys (with the closest valid one), value types and bounds from the annotations
  (`Annotated[int, Ge(1)]`, Literal choices), then the class's own `check_settings` hook, if
  it declares one (rules across parameters, files it will read);
- the run's own keys against a schema (seed, train, test, ckpt_path);
- the Trainer against the hardware present (accelerator, strategy, devices, precision);
- across groups: the monitored metric is one the model logs and is computed at all, missing
  `???` values, folders and checkpoint files, model/data task mismatch.
Only targets are imported (torch and lightning are, no data is read).
"""

import re
import typing
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.bounds import Seed
from litlab.config.checks import check_checkpoint as _check_checkpoint
from litlab.config.checks import check_monitor as _check_monitor
from litlab.config.checks import check_paths as _check_paths
from litlab.config.checks import check_run as _check_run
from litlab.config.signatures import bounds_by_name, conforms, describe, signature
from litlab.config.signatures import closest as _closest
from litlab.config.signatures import fmt as _fmt
from litlab.config.trainer_checks import check_trainer as _check_trainer
from litlab.config.trainer_checks import check_trainer_plain as _check_trainer_plain
from litlab.errors import UserError, one_line

_RAW: dict = {}  # the unresolved config, to say where an interpolated value came from


def _raw(key: str):
    node = _RAW
    for part in key.replace("]", "").replace("[", ".").split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _refuse(key: str, value, ann) -> None:
    """One line naming the key the user set: for a value interpolated from another key
    (`mode: ${model.monitor_mode}`), that key, and where its value is used."""
    raw = _raw(key)
    source = re.fullmatch(r"\$\{([\w.]+)\}", raw) if isinstance(raw, str) else None
    used = ""
    if source:
        key, used = source.group(1), f" (used as {key})"
    elif isinstance(raw, str) and "${" in raw:
        used = f" (set from {raw})"
    raise UserError(
        f"{key}={_fmt(value)} has the wrong type or value; valid: {describe(ann)}{used}"
    )


# ---------------------------------------------------------------- nodes with a _target_
def _import(path: str, target_name: str):
    import hydra

    try:
        return hydra.utils.get_object(target_name)
    except Exception as err:
        raise UserError(
            f"{path}._target_={target_name} cannot be imported: {one_line(err)}"
        ) from None


def _check_node(path: str, node: dict) -> None:
    """A config node with `_target_`: importable target, known keys, typed and bounded values,
    the target's own `check_settings`; recursive."""
    target_name = node["_target_"]
    target = _import(path, target_name)
    params, defaults, open_ended = signature(target)
    for name, value in node.items():
        key = f"{path}.{name}"
        if name.startswith("_"):
            continue
        if name not in params and not open_ended:
            raise UserError(
                f"unknown key {key} ({target_name} takes no '{name}'){_closest(name, params)}"
            )
        if isinstance(value, dict) and "_target_" in value:
            _check_node(key, value)
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict) and "_target_" in item:
                    _check_node(f"{key}[{i}]", item)
        if name in params and conforms(value, params[name]) is False:
            _refuse(key, value, params[name])
    hook = getattr(target, "check_settings", None)
    if callable(hook):
        settings = {**defaults, **{k: v for k, v in node.items() if not k.startswith("_")}}
        try:
            hook(settings, path)
        except UserError:
            raise
        except Exception as err:
            raise UserError(f"{path} ({target_name}): {one_line(err)}") from None


def _walk_plain(path: str, node) -> None:
    """The bounds known from a target's name alone (signatures.bounds_by_name): no import, so
    the common mistakes (epochs, learning rate, patience) fail in about a second."""
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            for name, ann in bounds_by_name(node["_target_"]).items():
                if name in node and conforms(node[name], ann) is False:
                    _refuse(f"{path}.{name}", node[name], ann)
        for k, v in node.items():
            _walk_plain(f"{path}.{k}" if path else str(k), v)


def _walk(path: str, node) -> None:
    if isinstance(node, dict):
        if "_target_" in node:
            _check_node(path, node)
            return
        for k, v in node.items():
            _walk(f"{path}.{k}" if path else str(k), v)


# ---------------------------------------------------------------- trainer and hardware
def _check_optimizer(model: dict) -> None:
    """Build the optimizer on a dummy parameter: torch's own range checks (betas, eps...)."""
    import hydra
    import torch

    opt = model.get("optimizer")
    if not (isinstance(opt, dict) and "_target_" in opt):
        return
    try:
        hydra.utils.instantiate(opt, _partial_=True)(params=[torch.nn.Parameter(torch.zeros(1))])
    except Exception as err:
        raise UserError(
            f"model.optimizer ({opt['_target_']}) rejects its settings: {one_line(err)}"
        ) from None


# ---------------------------------------------------------------- entry points
def _container(cfg: DictConfig) -> dict:
    global _RAW
    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra"))
    if missing:
        key = missing[0]
        hint = "=logs/train/runs/<run>/checkpoints/<file>.ckpt" if key == "ckpt_path" else "=VALUE"
        raise UserError(f"{key} is required: add {key}{hint} to the command")
    keys = [k for k in cfg if k != "hydra"]

    def plain(resolve: bool) -> dict:
        return {
            k: OmegaConf.to_container(cfg[k], resolve=resolve)
            if OmegaConf.is_config(cfg[k])
            else cfg[k]
            for k in keys
        }

    try:
        _RAW = plain(resolve=False)
        return plain(resolve=True)
    except Exception as err:
        raise UserError(f"the config does not resolve: {one_line(err)}") from None


def _top(c: dict, schema: dict) -> None:
    for key, ann in schema.items():
        if key in c and conforms(c[key], ann) is False:
            _refuse(key, c[key], ann)
    path = c.get("ckpt_path")
    if isinstance(path, str) and not Path(path).exists():  # before torch is imported
        raise UserError(f"ckpt_path={path}: no such checkpoint file")


def train_config(cfg: DictConfig) -> None:
    """Everything train.py needs, checked in about a second."""
    c = _container(cfg)
    _top(c, {"seed": Seed, "train": bool, "test": bool, "ckpt_path": str | None, "task_name": str})
    _check_run(c)
    _check_trainer_plain(c["trainer"])  # first the checks that import nothing
    _walk_plain("trainer", c["trainer"])  # first: other groups interpolate trainer keys
    _walk_plain("", c)
    _walk("trainer", c["trainer"])  # first: other groups interpolate trainer keys
    _check_trainer(c["trainer"])
    _walk("", {k: v for k, v in c.items() if k != "trainer"})
    _check_optimizer(c["model"])
    _check_paths(c["data"])
    from litlab.config.build import check_compatible

    check_compatible(cfg)
    _check_monitor(c)
    if c.get("ckpt_path"):
        _check_checkpoint(c["ckpt_path"], c["model"])


def federate_config(cfg: DictConfig) -> None:
    """federate.py's data, model, clients' trainer and Flower strategy (the other federate.*
    keys: `litlab.federated.settings`), before any data is read or Ray starts."""
    c = _container(cfg)
    _top(c, {"seed": Seed, "ckpt_path": str | None, "task_name": str})
    _check_trainer_plain(c["trainer"])
    _walk_plain("trainer", c["trainer"])
    _walk_plain("", c)
    _walk("trainer", c["trainer"])
    _check_trainer(c["trainer"])
    _walk("", {k: v for k, v in c.items() if k not in ("trainer", "federate")})
    _walk("federate.strategy", c["federate"]["strategy"])
    _check_optimizer(c["model"])
    _check_paths(c["data"])
    from litlab.config.build import check_compatible

    check_compatible(cfg)
    _check_monitor(c)


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
        _check_trainer_plain(trainer)
        _walk_plain("trainer", trainer)
        _walk("trainer", trainer)
        _check_trainer(trainer)


def eval_config(cfg: DictConfig) -> None:
    c = _container(cfg)
    _top(
        c,
        {
            "split": typing.Literal["test", "val"],
            "predictions": bool,
            "ckpt_path": str,
            "trust_checkpoint": bool,
        },
    )
    _check_trainer_plain(c["trainer"])
    _walk_plain("", c)
    _walk("", c)
    _check_trainer(c["trainer"])
    _check_checkpoint(c["ckpt_path"], None, trust=bool(c.get("trust_checkpoint")))


def closest_key(dotted: str, config_name: str, overrides: list[str]) -> str:
    """'; did you mean trainer.max_epochs?' for a key Hydra refused (composes without it)."""
    from litlab.config.compose import compose

    bad = dotted.lstrip("+~")
    kept = [
        o
        for o in overrides
        if not o.startswith(("-", "hydra.")) and o.split("=", 1)[0].lstrip("+~") != bad
    ]
    try:
        cfg = compose(config_name, kept)
    except Exception:
        return ""
    parent, _, name = bad.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return ""
    hint = _closest(name, [str(k) for k in node])
    return hint.replace("mean ", f"mean {parent}.") if parent and hint else hint
