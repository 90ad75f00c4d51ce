"""Turns a composed config into the objects of a run (datamodule, model, trainer).

Every `_target_` is instantiated here, in one place, so modules never receive raw configs.
"""
import contextlib
import inspect
import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from litlab.config.compose import CONFIG_DIR
from litlab.errors import UserError, first_line

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
    from litlab.config.checks import static_attr

    fits = []
    for path in sorted((CONFIG_DIR / "data").glob("*.yaml")):
        try:
            target = target_of(path)
            task = target and (static_attr(target, "task") or hydra.utils.get_class(target).task)
            if task in tasks:
                fits.append(path.stem)
        except Exception:  # a broken data config must not hide the real error
            continue
    return fits


def check_compatible(cfg: DictConfig) -> None:
    """Fail at once, in one line, when the model cannot train on the chosen data."""
    model_cls = hydra.utils.get_class(cfg.model._target_)
    data_cls = hydra.utils.get_class(cfg.data._target_)
    if data_cls.task not in model_cls.tasks:
        raise UserError(incompatible(model_cls.tasks, data_cls.task))


def incompatible(tasks, task: str) -> str:
    return (f"model={_choice('model')} ({', '.join(tasks)}) cannot train on "
            f"data={_choice('data')} ({task}); data that fit this model: "
            f"{', '.join(data_options(tasks))}")


@contextlib.contextmanager
def building(group: str, target: str):
    """Any error while `group` is built becomes one line (UserError), Hydra's wrapper removed:
    the message of a UserError inside it, else '<group> (<target>) cannot be built: <first
    line>'. HYDRA_FULL_ERROR=1 still shows the traceback (the cause is chained)."""
    from hydra.errors import InstantiationException

    try:
        yield
    except UserError:
        raise
    except InstantiationException as err:
        cause = err.__cause__ or err.__context__
        if isinstance(cause, UserError):
            raise cause from None
        raise UserError(f"{group} ({target}) cannot be built: {first_line(cause or err)}") from err
    except Exception as err:  # whatever a constructor raises: one line
        raise UserError(f"{group} ({target}) cannot be built: {first_line(err)}") from err


def datamodule(cfg: DictConfig):
    log.info("Instantiating datamodule <%s>", cfg.data._target_)
    with building("data", cfg.data._target_):
        return hydra.utils.instantiate(cfg.data, _convert_="all")


def model(cfg: DictConfig, dm):
    """The LightningModule, its net sized by the datamodule's `dims` (never duplicated in configs)."""
    check_compatible(cfg)
    with building("data", cfg.data._target_):
        dims = dm.dims
    with building("model.net", cfg.model.net._target_):
        net_factory = hydra.utils.instantiate(cfg.model.net, _partial_=True, _convert_="all")
        check_dims = getattr(net_factory.func, "check_dims", None)
        if callable(check_dims):  # a net's rules on the data's dims (patch sides vs strides)
            check_dims({**_defaults(net_factory.func), **net_factory.keywords}, dims, "model.net")
        net = net_factory(**_accepted(net_factory.func, dims))
    model_cls = hydra.utils.get_class(cfg.model._target_)
    log.info("Instantiating model <%s> with net <%s>", cfg.model._target_, cfg.model.net._target_)
    with building("model", cfg.model._target_):
        return hydra.utils.instantiate(cfg.model, net=net, _convert_="all",
                                       **_accepted(model_cls.__init__, dims))


def _defaults(fn) -> dict:
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.default is not p.empty}


def instantiate_all(cfg: DictConfig | None) -> list:
    """Instantiate every `_target_` entry of a group such as callbacks or logger."""
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for c in cfg.values()
            if isinstance(c, DictConfig) and "_target_" in c]


def _without_idle_checkpoints(callbacks: list) -> list:
    """Leave out a ModelCheckpoint with every trigger off (callbacks.step_checkpoint while
    every_n_train_steps=0) when it would only rewrite the last.ckpt another one writes: Lightning
    would still call its hooks at every step and write last.ckpt once more at the end."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    def idle(c) -> bool:
        return (isinstance(c, ModelCheckpoint) and not c._every_n_train_steps
                and not c._every_n_epochs and c._train_time_interval is None)

    last_writers = {c.dirpath for c in callbacks
                    if isinstance(c, ModelCheckpoint) and not idle(c) and c.save_last}
    return [c for c in callbacks
            if not (idle(c) and (not c.save_last or c.dirpath in last_writers))]


def trainer(cfg: DictConfig, extra_callbacks=()):
    from litlab.checkpointing.run_config import RunConfigInCheckpoint

    callbacks = _without_idle_checkpoints(instantiate_all(cfg.get("callbacks")))
    callbacks += list(extra_callbacks)
    callbacks.append(RunConfigInCheckpoint(OmegaConf.to_container(cfg, resolve=True)))
    loggers = instantiate_all(cfg.get("logger"))
    if not loggers:  # LearningRateMonitor refuses to run without a logger: skip it
        from lightning.pytorch.callbacks import LearningRateMonitor

        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    log.info("Instantiating trainer <%s>", cfg.trainer._target_)
    return hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
