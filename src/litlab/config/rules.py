"""The rules no single model can say, each one line (`UserError`): the nodes an entry point
builds from are there; model against data by their declared kinds, and the callbacks that
apply to the data's kind; the monitored metric exists and is computed; there is something to
train; the optimizer builds; the data folders exist; the Trainer's settings fit this machine
(accelerator, strategy, devices, precision: Lightning's registries and torch are asked, last).
`stages` runs them, with the nodes' models, in the order `config.validate` says.
"""

import contextlib
import logging
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab import tasks
from litlab.config.messages import node_errors
from litlab.config.resolvers import CONFIG_DIR
from litlab.errors import UserError, closest, one_line
from litlab.tasks import declared, kind_name_of_data

log = logging.getLogger(__name__)

#: the nodes each entry point builds from: deleting one (`~data`, `~model.optimizer`) or
#: setting it to null is refused naming it, before anything that reads it fails in a traceback
REQUIRED = {
    "train": ("trainer", "model", "model.net", "model.optimizer", "data", "paths"),
    "eval": ("trainer", "paths"),
    "federate": ("trainer", "model", "model.net", "model.optimizer", "data", "paths")
    + ("federate", "federate.strategy"),
    "compress": ("trainer", "paths"),
    "entry": ("paths",),  # export, serve and any other entry point
}
#: required nodes that are instantiated: left without a `_target_` when `~trainer` deletes the
#: group but the entry's own config still sets some of its keys (federate.yaml's trainer)
BUILT = ("trainer", "model", "model.net", "model.optimizer", "data", "federate.strategy")
#: what a required node is, by key
WHAT = {
    "trainer": "a trainer config (trainer=default, cpu, gpu, ddp, ...)",
    "model": "a model config (model=cnn, gnn, unet3d, ...)",
    "model.net": "the model's net node (a _target_ nn.Module)",
    "model.optimizer": "an optimizer node (_target_: torch.optim.AdamW, _partial_: true)",
    "data": "a data config (data=digits, mnist, cora, ...)",
    "paths": "paths=default",
    "federate.strategy": "federate/strategy=fedavg or fedprox",
}


def check_required(cfg: DictConfig, entry: str) -> None:
    """Each of the entry point's REQUIRED nodes is a group of keys (with a `_target_` where it
    is built), or one line naming it and what is valid."""
    for key in REQUIRED.get(entry, REQUIRED["entry"]):
        parent, _, name = key.rpartition(".")
        node = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False) if parent else cfg
        if not isinstance(node, DictConfig):
            continue  # a missing parent is named first (it comes first in REQUIRED)
        keys = list(node.keys())  # `name in node` would resolve an interpolated child
        if name in keys and (
            OmegaConf.is_missing(node, name) or OmegaConf.is_interpolation(node, name)
        ):
            continue  # `???` is named by validate's `_missing`; interpolations are resolved later
        child = node[name] if name in keys else None
        built = key in BUILT
        if not OmegaConf.is_dict(child) or (built and "_target_" not in list(child.keys())):
            who = f"src/{entry}.py" if entry in REQUIRED and entry != "entry" else "this command"
            what = "a group of keys with a _target_" if built else "a group of keys"
            raise UserError(
                f"{key} is required by {who} (deleted with ~{key}, or not {what}): drop that "
                f"override; valid: {WHAT.get(key, f'the {key} node of its config')}"
            )


def choice(group: str) -> str:
    from hydra.core.hydra_config import HydraConfig

    return str(HydraConfig.get().runtime.choices.get(group)) if HydraConfig.initialized() else "?"


def target_of(path) -> str | None:
    """A config file's `_target_`, following its defaults list (e.g. citeseer extends cora)."""
    node = OmegaConf.load(path)
    if "_target_" in node:
        return node._target_
    parents = [d for d in node.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    return target_of(path.parent / f"{parents[0]}.yaml") if parents else None


def data_options(kinds) -> list[str]:
    """Names of the data configs whose datamodule declares a kind in `kinds`."""
    fits = []
    for path in sorted((CONFIG_DIR / "data").glob("*.yaml")):
        try:
            target = target_of(path)
            if target and kind_name_of_data(target) in kinds:
                fits.append(path.stem)
        except Exception:  # a broken data config must not hide the real error
            continue
    return fits


def check_monitor(c: dict) -> None:
    """The monitored metric is one the model logs, and it is computed in this run."""
    import hydra

    model_cls = hydra.utils.get_class(c["model"]["_target_"])
    names = getattr(model_cls, "monitorable", None)
    keys = [("model.monitor", c["model"].get("monitor"))]
    for k, v in (c.get("callbacks") or {}).items():
        if isinstance(v, dict) and v.get("monitor"):
            keys.append((f"callbacks.{k}.monitor", v["monitor"]))
        if isinstance(v, dict) and isinstance(v.get("monitors"), dict):  # joint selection
            keys += [(f"callbacks.{k}.monitors", name) for name in v["monitors"]]
    for key, value in keys:
        if value and callable(names) and not names(value):
            valid = ", ".join(model_cls.monitor_examples())
            raise UserError(
                f"{key}={value} is not a metric {model_cls.__name__} logs; valid: {valid}"
            )
    t, monitor = c.get("trainer") or {}, str(c["model"].get("monitor") or "")
    no_val = t.get("limit_val_batches") == 0 or (
        isinstance(t.get("check_val_every_n_epoch"), int)
        and isinstance(t.get("max_epochs"), int)
        and 0 < t["max_epochs"] < t["check_val_every_n_epoch"]
    )
    if c.get("train") and monitor.startswith("val/") and no_val:
        raise UserError(
            f"model.monitor={monitor} but this run never validates "
            f"(trainer.limit_val_batches={t.get('limit_val_batches')}, "
            f"check_val_every_n_epoch={t.get('check_val_every_n_epoch')}); "
            f"validate, or set model.monitor=train/loss model.monitor_mode=min"
        )


def check_run(c: dict) -> None:
    if not c.get("train") and not c.get("test"):
        raise UserError("train=false and test=false: nothing to do; set train=true or test=true")
    if not c.get("train") and not c.get("ckpt_path"):
        raise UserError(
            "train=false tests an untrained model; pass ckpt_path=<.ckpt file or "
            "run dir> (or use src/eval.py ckpt_path=...)"
        )
    if c.get("train") and (c.get("trainer") or {}).get("limit_train_batches") in (0, 0.0):
        raise UserError(
            "trainer.limit_train_batches=0 trains nothing; use a fraction in (0, 1] "
            "or a number of batches >= 1 (or train=false ckpt_path=... to only test)"
        )


def check_optimizer(model: dict) -> None:
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


def check_paths(data: dict) -> None:
    if data.get("root") is not None and not Path(str(data["root"])).is_dir():
        raise UserError(
            f"data.root={data['root']} is not an existing folder; point it at your data"
        )
    if data.get("download") is False:
        for key, value in data.items():
            if key.endswith("_dir") and value is not None and not Path(str(value)).is_dir():
                raise UserError(
                    f"data.{key}={value} does not exist and data.download=false; "
                    f"point it at the folder that holds the data (or download=true)"
                )


def check_compatible(cfg: DictConfig) -> None:
    """Fail at once, in one line, when the model cannot train on the chosen data: read from
    the classes' declarations (`litlab.tasks`), without importing torch."""
    kind = tasks.kind_name_of_data(cfg.data._target_)
    fits = tasks.kinds_of_model(cfg.model._target_)
    if kind not in fits:
        raise UserError(
            f"model={choice('model')} ({', '.join(fits)}) cannot train on data={choice('data')} "
            f"({kind}); data that fit this model: {', '.join(data_options(fits))}"
        )
    fitting_callbacks(cfg, quiet=True)


def fitting_callbacks(cfg: DictConfig, quiet: bool = False) -> dict:
    """The callbacks that apply to the data's task kind: an inspect callback (one that
    declares `inspects = <name>`) applies when the kind lists that name. One that does not
    apply is refused in one line, or left out when its config says `unfit: skip`."""
    if not cfg.get("callbacks") or "data" not in cfg:  # eval.yaml: no callbacks, no data group
        return dict(cfg.get("callbacks") or {})
    kind = tasks.kind_of_data(cfg.data._target_)
    fits = {}
    for name, node in (cfg.get("callbacks") or {}).items():
        inspects = None
        if isinstance(node, DictConfig) and str(node.get("_target_", "")).startswith("litlab."):
            with contextlib.suppress(UserError):  # not importable: its node's model says so
                inspects = declared(node._target_, "inspects")
        if inspects and not kind.applies(inspects):
            if node.get("unfit") != "skip":
                raise UserError(
                    f"callbacks.{name} ({inspects}) does not apply to data={choice('data')} "
                    f"({kind.name}; it applies: {', '.join(kind.inspect) or 'none'}); "
                    f"remove it or pick other data"
                )
            if not quiet:
                log.info("callbacks.%s left out: it does not apply to %s", name, kind.name)
            continue
        fits[name] = node
    return fits


#: precisions Lightning accepts that a CPU run cannot use: no fp16 kernels for most CPU ops,
#: bf16-true casts the weights but not the batches (the first forward fails), and Transformer
#: Engine is CUDA only. 32-true, 64-true and bf16-mixed run on a CPU.
PRECISIONS_NOT_ON_CPU = (
    "16-mixed", "16", 16, "16-true", "bf16-true", "transformer-engine",
    "transformer-engine-float16",
)  # fmt: skip


def _available(accelerator: str) -> int:
    import torch

    if accelerator in ("gpu", "cuda"):
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())
    return os.cpu_count() or 1


def check_impossible_here(t: dict) -> None:
    """What needs no import: a GPU asked for where none can be (no device files), precision
    on a CPU. Asked before any target is imported (a refusal in about a second), and again by
    `check_trainer` once torch has said which accelerator `auto` is."""
    from litlab.config.resolvers import certainly_no_gpu

    accelerator = t.get("accelerator")
    if accelerator in ("gpu", "cuda") and certainly_no_gpu():
        raise UserError(
            f"trainer.accelerator={accelerator} but no GPU device is visible; use "
            f"trainer.accelerator=cpu (or trainer=cpu)"
        )
    if accelerator in ("auto", None) and certainly_no_gpu():
        accelerator = "cpu"
    if accelerator == "cpu" and t.get("precision") in PRECISIONS_NOT_ON_CPU:
        raise UserError(
            f"trainer.precision={t['precision']} is not supported on CPU; use "
            f"trainer.precision=bf16-mixed or 32-true on CPU (16-mixed, 16-true, bf16-true "
            f"and transformer-engine need a GPU)"
        )


def check_trainer(t: dict) -> None:
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    accelerator = t.get("accelerator") or "auto"
    if isinstance(accelerator, str):
        valid = sorted(AcceleratorRegistry.available_accelerators()) + ["auto", "gpu"]
        if accelerator not in valid:
            raise UserError(
                f"trainer.accelerator={accelerator} is not valid; valid: "
                f"{', '.join(valid)}{closest(accelerator, valid)}"
            )
        if accelerator in ("gpu", "cuda", "mps") and not _available(accelerator):
            raise UserError(
                f"trainer.accelerator={accelerator} but no {accelerator.upper()} "
                f"device is visible; use trainer.accelerator=cpu (or trainer=cpu)"
            )
        if accelerator == "auto":
            accelerator = "cuda" if _available("cuda") else ("mps" if _available("mps") else "cpu")
    strategy = t.get("strategy")
    if isinstance(strategy, str):
        valid = StrategyRegistry.available_strategies() + ["auto"]
        if strategy not in valid:
            raise UserError(
                f"trainer.strategy={strategy} is not valid; valid: auto, ddp, "
                f"ddp_spawn, fsdp, deepspeed, ... (lightning's StrategyRegistry)"
                f"{closest(strategy, valid)}"
            )
    check_impossible_here({**t, "accelerator": accelerator})
    _check_precision_on_gpu(t.get("precision"), accelerator)
    devices = t.get("devices")
    if isinstance(devices, str) and devices.lstrip("-").isdigit():
        devices = int(devices)
    have = _available(accelerator) if isinstance(accelerator, str) else None
    if have and isinstance(devices, int) and devices != -1 and not 1 <= devices <= have:
        raise UserError(
            f"trainer.devices={devices} is not valid on {accelerator}: this "
            f"machine has {have}; use 1..{have}, -1 or auto"
        )
    if have and isinstance(devices, list) and any(int(d) >= have for d in devices):
        raise UserError(
            f"trainer.devices={devices} names a device this machine lacks "
            f"({have} {accelerator} device(s): indices 0..{have - 1})"
        )


def _check_precision_on_gpu(precision, accelerator) -> None:
    """What the GPU present cannot run: bf16 on a GPU without bf16 (before Ampere), Transformer
    Engine without its package."""
    import importlib.util

    import torch

    text = str(precision)
    bf16_on_gpu = accelerator in ("gpu", "cuda") and text.startswith("bf16")
    if bf16_on_gpu and torch.cuda.device_count() and not torch.cuda.is_bf16_supported():
        raise UserError(
            f"trainer.precision={text}: this GPU ({torch.cuda.get_device_name(0)}) has no "
            "bfloat16; use trainer.precision=16-mixed or 32-true"
        )
    if text.startswith("transformer-engine") and not importlib.util.find_spec("transformer_engine"):
        raise UserError(
            f"trainer.precision={text} needs NVIDIA's transformer_engine package, which is "
            "not installed; use trainer.precision=bf16-mixed, 16-mixed or 32-true"
        )


def tensorrt_missing() -> str | None:
    """None when TensorRT can run here, else one sentence saying what is missing."""
    import importlib.util

    import torch

    lacks = []
    if not torch.cuda.is_available():
        lacks.append("a CUDA GPU (torch.cuda.is_available() is False)")
    if importlib.util.find_spec("torch_tensorrt") is None:
        lacks.append("the torch_tensorrt package (pip install -r requirements-gpu.txt)")
    if not lacks:
        return None
    return (
        f"tensorrt cannot run here: this machine lacks {' and '.join(lacks)}; formats onnx, "
        "pt2 and onnx_int8 work here"
    )


def stages(cfg: DictConfig, c: dict, raw: dict, own=None):
    """The errors of each stage after the settings (2 to 5 of `config.validate`), lazily: `c` is `cfg` plain
    and resolved; `own` the entry point's settings (None: a checkpoint's stored config)."""
    built = isinstance(c.get("model"), dict) and isinstance(c.get("data"), dict)
    errors = node_errors("", c, raw, imported=False)  # what a target's name tells: no import
    if built and not errors:
        errors = _quiet(check_compatible, cfg)
        if own is not None and not errors:
            errors = _quiet(own.check_kind, tasks.kind_of_data(c["data"]["_target_"]))
    if isinstance(c.get("trainer"), dict) and not errors:  # what this machine certainly lacks
        errors = _quiet(check_impossible_here, c["trainer"])
    yield errors + (_quiet(own.check_files_exist) if own is not None and not errors else [])
    yield node_errors("", {k: v for k, v in c.items() if k != "data_overrides"}, raw)
    checks = [(check_optimizer, c.get("model")), (check_monitor, c)] if built else []
    if own is not None:
        checks += [(check_paths, c.get("data"))] * built + [(own.check_groups, c)]
    if isinstance(c.get("trainer"), dict):
        checks.append((check_trainer, c["trainer"]))
    yield [e for check_, arg in checks for e in _quiet(check_, arg)]
    if own is not None:
        yield _quiet(own.check_files)


def _quiet(fn, *args) -> list[str]:
    try:
        fn(*args)
    except UserError as err:
        return [str(err)]
    return []
