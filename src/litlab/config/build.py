"""Turns a composed config into the objects of a run (datamodule, model, trainer).

Every `_target_` is instantiated here, in one place, so modules never receive raw configs.

Strategies whose class depends on the machine, built by `trainer.strategy._target_`.

`fsdp`: trainer=fsdp. On GPUs, Lightning's FSDPStrategy (torch's FullyShardedDataParallel,
"FSDP1"). On CPUs torch 2.14's FSDP1 refuses to run ("FSDP needs a non-CPU accelerator device,
but no accelerator device is detected", and Lightning's FSDPStrategy refuses a CPU before
that), but torch's FSDP2 (`fully_shard`) shards over gloo: there it is Lightning's
ModelParallelStrategy with every process a data-parallel shard (no tensor parallelism), the
net sharded layer by layer in `LitModule.configure_model`, and checkpoints written whole
(one .ckpt file that eval.py, load_run and resume read as any other).
"""

import contextlib
import inspect
import logging
from typing import Literal

import hydra
from omegaconf import DictConfig

from litlab.config.resolvers import on_gpu
from litlab.config.rules import check_compatible, fitting_callbacks
from litlab.console import FILE_ONLY
from litlab.errors import UserError, one_line

log = logging.getLogger(__name__)


def _accepted(fn, kwargs: dict) -> dict:
    """The subset of `kwargs` that `fn` names as parameters (all of them for a factory that
    passes them on to the net it wraps: `passes_dims_on`, a pruned net's rebuild)."""
    if getattr(fn, "passes_dims_on", False):
        return dict(kwargs)
    names = set(inspect.signature(fn).parameters)
    return {k: v for k, v in kwargs.items() if k in names}


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
        raise UserError(f"{group} ({target}) cannot be built: {one_line(cause or err)}") from err
    except Exception as err:  # whatever a constructor raises: one line
        raise UserError(f"{group} ({target}) cannot be built: {one_line(err)}") from err


def datamodule(cfg: DictConfig):
    log.info("Instantiating datamodule <%s>", cfg.data._target_, extra=FILE_ONLY)
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
    log.info(
        "Instantiating model <%s> with net <%s>",
        cfg.model._target_,
        cfg.model.net._target_,
        extra=FILE_ONLY,
    )
    with building("model", cfg.model._target_):
        return hydra.utils.instantiate(
            cfg.model, net=net, _convert_="all", **_accepted(model_cls.__init__, dims)
        )


def _defaults(fn) -> dict:
    return {
        k: p.default
        for k, p in inspect.signature(fn).parameters.items()
        if p.default is not p.empty
    }


def instantiate_all(cfg, group: str = "callbacks") -> list:
    """Instantiate every `_target_` entry of a group such as callbacks or logger; an entry that
    cannot be built is one line naming it (`callbacks.<name> (<target>) cannot be built: ...`)."""
    built = []
    for name, c in (cfg or {}).items():
        if isinstance(c, DictConfig) and "_target_" in c:
            with building(f"{group}.{name}", c._target_):
                built.append(hydra.utils.instantiate(c))
    return built


def trainer(cfg: DictConfig, extra_callbacks=()):
    """The Trainer of `cfg.trainer`, with the callbacks and loggers the config lists, plus
    `extra_callbacks` that the caller passes in plain sight. The only callbacks left out are
    those whose YAML says `unfit: skip` for another data task (see `fitting_callbacks`)."""
    callbacks = instantiate_all(fitting_callbacks(cfg)) + list(extra_callbacks)
    loggers = instantiate_all(cfg.get("logger"), "logger")
    log.info("Instantiating trainer <%s>", cfg.trainer._target_, extra=FILE_ONLY)
    with building("trainer", cfg.trainer._target_):
        return hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)


# ------------------------------------------------------------ strategies
def fsdp(
    accelerator: str = "auto",
    devices: int | str = "auto",
    num_nodes: int = 1,
    sharding_strategy: Literal[
        "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"
    ] = "FULL_SHARD",
    state_dict_type: Literal["full", "sharded"] = "full",
    cpu_offload: bool = False,
):
    """FSDPStrategy on GPUs, ModelParallelStrategy (FSDP2 over gloo) on CPUs (see above)."""
    if on_gpu(str(accelerator), True, False):  # as fsdp.yaml's devices and precision
        from lightning.pytorch.strategies import FSDPStrategy

        return FSDPStrategy(
            sharding_strategy=sharding_strategy,
            state_dict_type=state_dict_type,
            cpu_offload=cpu_offload,
        )
    from lightning.pytorch.strategies import ModelParallelStrategy

    processes = int(devices) * int(num_nodes)
    return ModelParallelStrategy(
        data_parallel_size=processes,
        tensor_parallel_size=1,
        save_distributed_checkpoint=state_dict_type == "sharded",
        process_group_backend="gloo",
    )
