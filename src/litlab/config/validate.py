"""Checks a composed config before any data is loaded or any model built: bad input costs one
line (key, bad value, what is valid) and exit 2, in seconds.

Generic on purpose, so every domain's configs are covered without lists per class:
- every node with a `_target_` is checked against the signature of its target: unknown keys
  (with the closest valid one), and value types against the annotations (int, float, bool,
  str, Literal choices, Optional, unions);
- range rules by key name (`lr`, `batch_size`, `*_fraction`, `dropout`, `num_workers`, ...);
- Trainer rules: max_epochs, precision (and 16-mixed on CPU), accelerator, strategy, devices
  against the hardware present;
- missing `???` values, missing folders and checkpoint files, model/data task mismatch.
Only targets are imported (torch and lightning are, no data is read).
"""
import os
import typing
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.errors import UserError, first_line
from litlab.config.signatures import closest as _closest
from litlab.config.signatures import conforms, describe, parameters
from litlab.config.signatures import fmt as _fmt

PRECISIONS_NOT_ON_CPU = ("16-mixed", "16", 16)


# ---------------------------------------------------------------- rules by key name
def _number(key, value, low=None, high=None, integer=False, what=""):
    ok_type = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not ok_type or (low is not None and value < low) or (high is not None and value > high):
        raise UserError(f"{key}={_fmt(value)} is not valid; {what}")


def _name_rules(key: str, name: str, value) -> None:
    if value is None:
        return
    if name in ("lr", "learning_rate") or name.endswith("_lr"):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            raise UserError(f"{key}={_fmt(value)} is not valid; a learning rate must be > 0 (e.g. 1e-3)")
    elif name == "batch_size":
        _number(key, value, 1, integer=True, what="use an integer >= 1")
    elif name == "num_workers":
        _number(key, value, 0, integer=True, what="use an integer >= 0 (0 loads in the main process)")
    elif name.endswith("_fraction"):
        _number(key, value, 0, 1, what="use a fraction between 0 and 1")
        if value in (0, 1):
            raise UserError(f"{key}={value} is not valid; use a fraction strictly between 0 and 1")
    elif name == "dropout":
        _number(key, value, 0, 0.999999, what="use a probability in [0, 1)")
    elif name in ("mode", "monitor_mode") and value not in ("min", "max"):
        raise UserError(f"{key}={_fmt(value)} is not valid; use min or max")


def _check_node(path: str, node: dict) -> None:
    """A config node with `_target_`: importable target, known keys, typed values; recursive."""
    import hydra

    target_name = node["_target_"]
    try:
        target = hydra.utils.get_object(target_name)
    except Exception as err:
        raise UserError(f"{path}._target_={target_name} cannot be imported: "
                        f"{first_line(err)}") from None
    params, open_ended = parameters(target)
    for name, value in node.items():
        key = f"{path}.{name}"
        if name.startswith("_"):
            continue
        if name not in params and not open_ended:
            raise UserError(f"unknown key {key} ({target_name} takes no '{name}')"
                            f"{_closest(name, params)}")
        if isinstance(value, dict) and "_target_" in value:
            _check_node(key, value)
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict) and "_target_" in item:
                    _check_node(f"{key}[{i}]", item)
        if name in params and conforms(value, params[name]) is False:
            raise UserError(f"{key}={_fmt(value)} has the wrong type or value; valid: "
                            f"{describe(params[name])}")


def _walk_names(path: str, node) -> None:
    """The rules by key name over the whole tree: no imports, so they fail in a second."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) \
        else ()
    for k, v in items:
        key = f"{path}.{k}" if path else str(k)
        if isinstance(v, (dict, list)):
            _walk_names(key, v)
        elif isinstance(k, str):
            _name_rules(key, k, v)


def _walk(path: str, node) -> None:
    if isinstance(node, dict):
        if "_target_" in node:
            _check_node(path, node)
            return
        for k, v in node.items():
            _walk(f"{path}.{k}" if path else str(k), v)


# ---------------------------------------------------------------- trainer and hardware
def _available(accelerator: str) -> int:
    import torch

    if accelerator in ("gpu", "cuda"):
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())
    return os.cpu_count() or 1


def _check_trainer_numbers(t: dict) -> None:
    for key in ("max_epochs", "max_steps"):
        value = t.get(key)
        if value is not None and value != -1:
            _number(f"trainer.{key}", value, 1, integer=True,
                    what="use an integer >= 1 (or -1 for no limit)")
    for key in ("min_epochs", "accumulate_grad_batches", "check_val_every_n_epoch", "log_every_n_steps"):
        if t.get(key) is not None:
            low = 0 if key == "min_epochs" else 1
            _number(f"trainer.{key}", t[key], low, integer=True, what=f"use an integer >= {low}")
    for key in ("limit_train_batches", "limit_val_batches", "limit_test_batches"):
        value = t.get(key)
        if isinstance(value, float) and not 0.0 <= value <= 1.0 or isinstance(value, int) and value < 0:
            raise UserError(f"trainer.{key}={value} is not valid; use a fraction in [0, 1] "
                            f"or a number of batches >= 0")


def _check_trainer(t: dict) -> None:
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    accelerator = t.get("accelerator") or "auto"
    if isinstance(accelerator, str):
        valid = sorted(AcceleratorRegistry.available_accelerators()) + ["auto", "gpu"]
        if accelerator not in valid:
            raise UserError(f"trainer.accelerator={accelerator} is not valid; valid: "
                            f"{', '.join(valid)}{_closest(accelerator, valid)}")
        if accelerator in ("gpu", "cuda", "mps") and not _available(accelerator):
            raise UserError(f"trainer.accelerator={accelerator} but no {accelerator.upper()} "
                            f"device is visible; use trainer.accelerator=cpu (or trainer=cpu)")
        if accelerator == "auto":
            accelerator = "cuda" if _available("cuda") else ("mps" if _available("mps") else "cpu")
    strategy = t.get("strategy")
    if isinstance(strategy, str):
        valid = StrategyRegistry.available_strategies() + ["auto"]
        if strategy not in valid:
            raise UserError(f"trainer.strategy={strategy} is not valid; valid: auto, ddp, "
                            f"ddp_spawn, fsdp, deepspeed, ... (lightning's StrategyRegistry)"
                            f"{_closest(strategy, valid)}")
    precision = t.get("precision")
    if accelerator == "cpu" and precision in PRECISIONS_NOT_ON_CPU:
        raise UserError(f"trainer.precision={precision} is not supported on CPU; use "
                        f"trainer.precision=bf16-mixed or 32-true on CPU (16-mixed needs a GPU)")
    devices = t.get("devices")
    if isinstance(devices, str) and devices.lstrip("-").isdigit():
        devices = int(devices)
    have = _available(accelerator) if isinstance(accelerator, str) else None
    if have and isinstance(devices, int) and devices != -1 and not 1 <= devices <= have:
        raise UserError(f"trainer.devices={devices} is not valid on {accelerator}: this "
                        f"machine has {have}; use 1..{have}, -1 or auto")
    if have and isinstance(devices, list) and any(int(d) >= have for d in devices):
        raise UserError(f"trainer.devices={devices} names a device this machine lacks "
                        f"({have} {accelerator} device(s): indices 0..{have - 1})")


def _check_optimizer(model: dict) -> None:
    """Build the optimizer on a dummy parameter: torch's own range checks (lr, betas, eps)."""
    import hydra
    import torch

    opt = model.get("optimizer")
    if not (isinstance(opt, dict) and "_target_" in opt):
        return
    try:
        hydra.utils.instantiate(opt, _partial_=True)(params=[torch.nn.Parameter(torch.zeros(1))])
    except (ValueError, TypeError) as err:
        raise UserError(f"model.optimizer ({opt['_target_']}) rejects its settings: "
                        f"{str(err).splitlines()[0]}") from None


# ---------------------------------------------------------------- files
def _check_paths(data: dict) -> None:
    if data.get("root") is not None and not Path(str(data["root"])).is_dir():
        raise UserError(f"data.root={data['root']} is not an existing folder; point it at your data")
    if data.get("download") is False:
        for key, value in data.items():
            if key.endswith("_dir") and value is not None and not Path(str(value)).is_dir():
                raise UserError(f"data.{key}={value} does not exist and data.download=false; "
                                f"point it at the folder that holds the data (or download=true)")


def _check_checkpoint(path, cfg_model: dict | None) -> None:
    """The file exists, is a complete litlab checkpoint (weights_only), of this model."""
    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.checkpointing import load as checkpoint

    p = Path(str(path))
    if p.is_dir():
        files = sorted(f.name for f in (p / "checkpoints").glob("*.ckpt")) or sorted(f.name for f in p.glob("*.ckpt"))
        raise UserError(f"ckpt_path={path} is a folder; pass a .ckpt file"
                        + (f" such as {p / 'checkpoints' / files[0]}" if files else ""))
    ckpt = checkpoint.load(p, mmap=True)  # the tensors are not read
    theirs = (ckpt[CONFIG_KEY].get("model") or {}).get("_target_")
    if cfg_model is not None and theirs != cfg_model.get("_target_"):
        raise UserError(f"ckpt_path={path} holds a {theirs} model; this run builds "
                        f"{cfg_model.get('_target_')}: pick the matching model=... or checkpoint")


# ---------------------------------------------------------------- entry points
def _container(cfg: DictConfig) -> dict:
    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra"))
    if missing:
        key = missing[0]
        hint = "=logs/train/runs/<run>/checkpoints/<file>.ckpt" if key == "ckpt_path" else "=VALUE"
        raise UserError(f"{key} is required: add {key}{hint} to the command")
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as err:
        raise UserError(f"the config does not resolve: {str(err).splitlines()[0]}") from None


def _top(c: dict, schema: dict) -> None:
    for key, ann in schema.items():
        if key in c and conforms(c[key], ann) is False:
            raise UserError(f"{key}={_fmt(c[key])} has the wrong type or value; valid: {describe(ann)}")


def train_config(cfg: DictConfig) -> None:
    """Everything train.py needs, checked in about a second."""
    c = _container(cfg)
    c.pop("hydra", None)
    _top(c, {"seed": int, "train": bool, "test": bool, "ckpt_path": str | None, "task_name": str})
    if not c.get("train") and not c.get("test"):
        raise UserError("train=false and test=false: nothing to do; set train=true or test=true")
    _check_trainer_numbers(c["trainer"])  # first the checks that import nothing
    _walk_names("", c)
    _walk("trainer", c["trainer"])  # first: other groups interpolate trainer keys
    _check_trainer(c["trainer"])
    _walk("", {k: v for k, v in c.items() if k != "trainer"})
    _check_optimizer(c["model"])
    _check_paths(c["data"])
    from litlab.config.build import check_compatible

    check_compatible(cfg)
    if c.get("ckpt_path"):
        _check_checkpoint(c["ckpt_path"], c["model"])


def eval_config(cfg: DictConfig) -> None:
    c = _container(cfg)
    c.pop("hydra", None)
    _top(c, {"split": typing.Literal["test", "val"], "predictions": bool, "ckpt_path": str})
    _check_trainer_numbers(c["trainer"])
    _walk_names("", c)
    _walk("", c)
    _check_trainer(c["trainer"])
    _check_checkpoint(c["ckpt_path"], None)


def closest_key(dotted: str, config_name: str, overrides: list[str]) -> str:
    """'; did you mean trainer.max_epochs?' for a key Hydra refused (composes without it)."""
    from litlab.config.compose import compose

    bad = dotted.lstrip("+~")
    kept = [o for o in overrides if not o.startswith(("-", "hydra."))
            and o.split("=", 1)[0].lstrip("+~") != bad]
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
