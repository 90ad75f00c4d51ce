"""Turns a composed config into the objects of a run (datamodule, model, trainer).

Every `_target_` is instantiated here, in one place, so modules never receive raw configs.
"""
import inspect
import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from litlab.errors import UserError
from litlab.config.compose import CONFIG_DIR

log = logging.getLogger(__name__)


def _choice(group: str) -> str:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return str(HydraConfig.get().runtime.choices.get(group))
    return "?"


def _accepted(fn, kwargs: dict) -> dict:
    """The subset of `kwargs` that `fn` names as parameters."""
    names = set(inspect.signature(fn).parameters)
    return {k: v for k, v in kwargs.items() if k in names}


def target_of(path) -> str | None:
    """A config file's `_target_`, following its defaults list (e.g. citeseer extends cora)."""
    node = OmegaConf.load(path)
    if "_target_" in node:
        return node._target_
    parents = [d for d in node.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    return target_of(path.parent / f"{parents[0]}.yaml") if parents else None


def data_options(tasks) -> list[str]:
    """Names of the data configs whose datamodule has a task in `tasks`."""
    fits = []
    for path in sorted((CONFIG_DIR / "data").glob("*.yaml")):
        try:
            target = target_of(path)
            if target and hydra.utils.get_class(target).task in tasks:
                fits.append(path.stem)
        except Exception:  # a broken data config must not hide the real error
            continue
    return fits


def check_compatible(cfg: DictConfig) -> None:
    """Fail at once, in one line, when the model cannot train on the chosen data."""
    model_cls = hydra.utils.get_class(cfg.model._target_)
    data_cls = hydra.utils.get_class(cfg.data._target_)
    if data_cls.task not in model_cls.tasks:
        raise UserError(
            f"model={_choice('model')} ({', '.join(model_cls.tasks)}) cannot train on "
            f"data={_choice('data')} ({data_cls.task}); data that fit this model: "
            f"{', '.join(data_options(model_cls.tasks))}")
    fitting_callbacks(cfg, quiet=True)


def fitting_callbacks(cfg: DictConfig, quiet: bool = False) -> dict:
    """The callbacks whose `tasks` (if they declare any) include the data task. One that does
    not fit is refused in one line, or left out when its config says `unfit: skip`."""
    if not cfg.get("callbacks") or "data" not in cfg:  # eval.yaml: no callbacks, no data group
        return dict(cfg.get("callbacks") or {})
    task = hydra.utils.get_class(cfg.data._target_).task
    fits = {}
    for name, node in (cfg.get("callbacks") or {}).items():
        tasks = (getattr(hydra.utils.get_class(node._target_), "tasks", None)
                 if isinstance(node, DictConfig) and "_target_" in node else None)
        if tasks and task not in tasks:
            if node.get("unfit") != "skip":
                raise UserError(f"callbacks.{name} ({', '.join(tasks)}) does not fit "
                                f"data={_choice('data')} ({task}); remove it or pick other data")
            if not quiet:
                log.info("callbacks.%s left out: it does not fit %s", name, task)
            continue
        fits[name] = node
    return fits


def datamodule(cfg: DictConfig):
    log.info("Instantiating datamodule <%s>", cfg.data._target_)
    return hydra.utils.instantiate(cfg.data, _convert_="all")


def model(cfg: DictConfig, dm):
    """The LightningModule, its net sized by the datamodule's `dims` (never duplicated in configs)."""
    check_compatible(cfg)
    dims = dm.dims
    net_factory = hydra.utils.instantiate(cfg.model.net, _partial_=True, _convert_="all")
    net = net_factory(**_accepted(net_factory.func, dims))
    model_cls = hydra.utils.get_class(cfg.model._target_)
    log.info("Instantiating model <%s> with net <%s>", cfg.model._target_, cfg.model.net._target_)
    return hydra.utils.instantiate(cfg.model, net=net, _convert_="all",
                                   **_accepted(model_cls.__init__, dims))


def instantiate_all(cfg: DictConfig | None) -> list:
    """Instantiate every `_target_` entry of a group such as callbacks or logger."""
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for c in cfg.values()
            if isinstance(c, DictConfig) and "_target_" in c]


def trainer(cfg: DictConfig, extra_callbacks=()):
    """The Trainer of `cfg.trainer`, with the callbacks and loggers the config lists, plus
    `extra_callbacks` that the caller passes in plain sight. The only callbacks left out are
    those whose YAML says `unfit: skip` for another data task (see `fitting_callbacks`)."""
    callbacks = instantiate_all(fitting_callbacks(cfg)) + list(extra_callbacks)
    loggers = instantiate_all(cfg.get("logger"))
    log.info("Instantiating trainer <%s>", cfg.trainer._target_)
    return hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
