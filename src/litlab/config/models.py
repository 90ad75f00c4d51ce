"""The models a config is judged by, all pydantic: an entry point's own keys (a `Settings`
model of `config.entries`) and every node with a `_target_` (`node_model`: derived from its
target's signature, as torchtune binds each component to its class). pydantic judges types and
bounds strictly (`lr=fast`, `dropout=true` are refused, never coerced; nan and inf for no
float); `config.messages` turns each of its errors into the line a user reads.

The checks come from the targets themselves, never from key names: a litlab class annotates
its parameters with `litlab.bounds` (a plain string in the metadata is the text shown), and a
classmethod `check_settings(settings, key)` holds its rules across parameters; the classes of
other libraries take their bounds from `EXTERNAL`, below.
"""

import collections.abc
import functools
import inspect
import types
import typing
from typing import Annotated, ClassVar, Literal

import annotated_types as at
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)

from litlab.bounds import LearningRate, MinMax, NonNegFloat, NonNegInt, PosInt
from litlab.errors import UserError, one_line

#: how every value is judged: no coercion (`lr="1"`), no nan or inf
VALUES = ConfigDict(strict=True, allow_inf_nan=False)
STRICT = ConfigDict(**VALUES, extra="forbid", frozen=True)


class Settings(BaseModel):
    """An entry point's own keys: strict types, no unknown keys, read-only. Rules across its
    keys are `@model_validator(mode="after")`s raising `UserError`; the hooks below run where
    `config.validate` says."""

    model_config = STRICT

    @classmethod
    def prepare(cls, cfg) -> None:
        """Settings resolved in the config before it is checked (federate's `auto`)."""

    def run_view(self, cfg):
        """The config the run will see (compress: the checkpoint's model and data join)."""
        return cfg

    def check_kind(self, kind) -> None:
        """Rules on the data's task kind (`litlab.tasks.Kind`); raise `UserError`."""

    def check_files_exist(self) -> None:
        """The files the settings name are there at all: asked before any target is imported
        (a path to nothing is told in a second, not after torch's import)."""

    def check_groups(self, config: dict) -> None:
        """Rules across the run's groups (plain, resolved, every target checked)."""

    def check_files(self) -> None:
        """What the settings name outside the config (files, ports), checked last."""


class Node(BaseModel):
    """A `_target_` node: its target's parameters as fields (`node_model`)."""

    model_config = ConfigDict(**VALUES, extra="forbid")
    target: ClassVar[str] = ""
    shown: ClassVar[dict] = {}  # parameter -> its annotation as declared (for messages)
    defaults: ClassVar[dict] = {}


class OpenNode(Node):
    """A target that takes `**kwargs` it passes on to other libraries: any key."""

    model_config = ConfigDict(**VALUES, extra="allow")


def signature(target) -> tuple[dict, dict, bool]:
    """(annotations, defaults, open_ended) of a class's constructor (following litlab's
    **kwargs up the MRO) or a function's parameters; `EXTERNAL` overrides annotations."""
    params, defaults, fns = {}, {}, [target]
    if inspect.isclass(target):
        fns = [c.__dict__["__init__"] for c in target.__mro__ if "__init__" in c.__dict__]
    open_ended = True
    for fn in fns:
        if fn is object.__init__:  # every __init__ above passed **kwargs on: open-ended
            break
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            break
        try:
            hints = typing.get_type_hints(inspect.unwrap(fn), include_extras=True)
        except Exception:  # an annotation that does not resolve: unchecked
            hints = {}
        for name, p in sig.parameters.items():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self":
                params.setdefault(name, hints.get(name, typing.Any))
                if p.default is not p.empty:
                    defaults.setdefault(name, p.default)
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            open_ended = False
            break
        if not getattr(fn, "__module__", "").startswith("litlab."):
            break  # third-party **kwargs go anywhere; litlab's pass theirs to the base class
    mro = [f"{c.__module__}.{c.__qualname__}" for c in getattr(target, "__mro__", ())]
    params.update({k: v for k, v in table(mro).items() if k in params})
    return params, defaults, open_ended


def _no_scalar(value):
    if isinstance(value, (str, bool, list, dict)):
        raise ValueError("a config scalar is never a tensor (lr=fast)")  # noqa: TRY004
    return value


def form(ann):
    """`ann` as pydantic should judge a config's plain values: classes a config cannot hold as
    a value (nets, callables, paths: built from a node or converted by the constructor) take
    anything; a list or tuple takes either (YAML has only lists)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Annotated:
        return Annotated[(form(args[0]), *args[1:])]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(form(a) for a in args)]  # noqa: UP007 (of a tuple)
    if origin is Literal or ann in (int, float, str, bool, type(None)):
        return ann
    if ann in (list, tuple) or origin in (list, tuple, typing.Sequence, collections.abc.Sequence):
        if origin is tuple and len(args) > 1 and args[1] is not ...:
            return typing.Any  # a fixed-length tuple: its constructor judges it
        item = form(args[0]) if args else typing.Any
        return list[item] | tuple[item, ...]  # strict: a str is no list
    if ann is dict or origin is dict:
        return dict
    if getattr(ann, "__name__", "") == "Tensor":
        return Annotated[typing.Any, AfterValidator(_no_scalar)]
    return typing.Any


def _judged(ann):
    """`form(ann)`, or anything where pydantic has no rule for it (left to the constructor)."""
    try:
        TypeAdapter(form(ann), config=VALUES)
        return form(ann)
    except Exception:  # schema errors, unhashable metadata
        return typing.Any


def accepts(value, ann) -> bool:
    """Whether `value` (plain config data) is valid for `ann`, as a node's model judges it."""
    try:
        TypeAdapter(_judged(ann), config=VALUES).validate_python(value)
    except (ValidationError, TypeError):  # TypeError: a bound compared with another type
        return False
    return True


def _plain(value):
    return value if isinstance(value, (int, float, str, bool, type(None))) else None


@functools.lru_cache(maxsize=1024)
def node_model(target_name: str, imported: bool = True) -> type[Node]:
    """The model of a node of `target_name`: its signature's parameters (`imported`), or only
    what `EXTERNAL` knows by the name, without importing anything (a first pass)."""
    if imported:
        params, defaults, open_ended = signature(import_target(target_name))
    else:
        params, defaults, open_ended = table([target_name]), {}, True
    fields = {  # parameters under safe names (`json`, `copy`...), the name as their alias
        f"p{i}": (_judged(ann), Field(_plain(defaults.get(name)), alias=name))
        for i, (name, ann) in enumerate(params.items())
    }
    base = OpenNode if open_ended else Node
    model = create_model(target_name.replace(".", "_"), __base__=base, **fields)
    model.target, model.shown, model.defaults = target_name, params, defaults
    return model


def import_target(target_name: str):
    import hydra

    try:
        return hydra.utils.get_object(target_name)
    except Exception as err:
        raise UserError(f"._target_={target_name} cannot be imported: {one_line(err)}") from None


# ------------------------------------------------------- other libraries
_BATCHES = Annotated[
    Annotated[float, at.Interval(ge=0, le=1)] | NonNegInt,
    "a fraction in [0, 1] or a number of batches >= 0",
]
_EPOCHS = Annotated[PosInt | Literal[-1], "an integer >= 1 (or -1 for no limit)"]
# null: Lightning's default (1000 epochs), or the entry's own (compress: per task kind)
_MAX_EPOCHS = Annotated[
    PosInt | Literal[-1] | None, "an integer >= 1, -1 for no limit, or null (the default)"
]

_UNIT = Annotated[float, at.Interval(ge=0, le=1)]
_BELOW_ONE = Annotated[float, at.Interval(ge=0, lt=1)]
_LR_FLOOR = Annotated[float, at.Interval(ge=0, le=10), "a learning rate in [0, 10]"]
# val_check_interval: a fraction of the training epoch, or a number of batches
_INTERVAL = Annotated[
    Annotated[float, at.Interval(gt=0, le=1)] | PosInt,
    "a fraction in (0, 1] or a number of batches >= 1",
]

# Bounds for the classes of other libraries, by "module.QualName" (no import needed here),
# inherited by subclasses: the annotations those libraries would carry if they were stricter.
# Rates and factors are bounded above, so `lr=1e30` or `momentum=2` fail before anything runs.
EXTERNAL: dict[str, dict] = {
    "torch.optim.optimizer.Optimizer": {
        "lr": LearningRate,
        # decoupled (AdamW) or L2 (SGD): above 1 it outweighs the loss
        "weight_decay": _UNIT,
        "momentum": _BELOW_ONE,
        "dampening": _UNIT,
        "betas": Annotated[
            list[_BELOW_ONE] | tuple[_BELOW_ONE, ...],
            at.MinLen(2),
            at.MaxLen(2),
            "two numbers in [0, 1) (e.g. [0.9, 0.999])",
        ],
        "eps": Annotated[float, at.Interval(gt=0, le=1)],
        "alpha": _BELOW_ONE,  # RMSprop's smoothing
        "rho": _UNIT,  # Adadelta
        "lr_decay": _UNIT,  # Adagrad
        "initial_accumulator_value": NonNegFloat,
    },
    "torch.optim.lr_scheduler.LRScheduler": {
        "T_max": PosInt,
        "step_size": PosInt,
        # decay per step or epoch: above 1 the learning rate grows without bound
        "gamma": Annotated[float, at.Interval(gt=0, le=1)],
        "eta_min": _LR_FLOOR,
        "T_0": PosInt,
        "T_mult": PosInt,
        "warmup_steps": NonNegInt,
        "total_iters": PosInt,
        "total_steps": PosInt | None,
        "epochs": PosInt | None,
        "steps_per_epoch": PosInt | None,
        "milestones": Annotated[list[PosInt], at.MinLen(1)],
        "max_lr": LearningRate | list[LearningRate],  # CyclicLR, OneCycleLR: one per group
        "base_lr": _LR_FLOOR | list[_LR_FLOOR],
        "start_factor": Annotated[float, at.Interval(gt=0, le=1)],
        "end_factor": _UNIT,
        "factor": Annotated[float, at.Interval(gt=0, lt=1)],
        "pct_start": Annotated[float, at.Interval(gt=0, lt=1)],
        "patience": NonNegInt,
        "min_lr": _LR_FLOOR | list[_LR_FLOOR],
        "cooldown": NonNegInt,
        "threshold": NonNegFloat,
    },
    # ConstantLR's factor multiplies the lr for a while (0 allowed), unlike ReduceLROnPlateau's
    "torch.optim.lr_scheduler.ConstantLR": {"factor": _UNIT},
    "lightning.pytorch.trainer.trainer.Trainer": {
        "max_epochs": _MAX_EPOCHS,
        "max_steps": _EPOCHS,
        "min_epochs": NonNegInt | None,
        "limit_train_batches": _BATCHES,
        "limit_val_batches": _BATCHES,
        "limit_test_batches": _BATCHES,
        "limit_predict_batches": _BATCHES,
        "accumulate_grad_batches": PosInt,
        "check_val_every_n_epoch": PosInt | None,
        "log_every_n_steps": PosInt | None,
        "gradient_clip_val": NonNegFloat | None,
        "val_check_interval": _INTERVAL | None,
        "overfit_batches": _BATCHES,
        "min_steps": NonNegInt | None,
        "gradient_clip_algorithm": Literal["value", "norm"] | None,
        "num_sanity_val_steps": Annotated[
            NonNegInt | Literal[-1], "an integer >= 0 (or -1 for all batches)"
        ],
        "num_nodes": PosInt,
    },
    "flwr.serverapp.strategy.fedprox.FedProx": {
        "proximal_mu": Annotated[NonNegFloat, "a proximal weight >= 0 (0 is FedAvg)"],
    },
    "lightning.pytorch.callbacks.early_stopping.EarlyStopping": {
        "mode": MinMax,
        "patience": NonNegInt,
        "min_delta": NonNegFloat,
    },
    "lightning.pytorch.callbacks.model_checkpoint.ModelCheckpoint": {
        "mode": MinMax,
        "save_top_k": Annotated[int, at.Ge(-1)],
        "every_n_train_steps": NonNegInt | None,
        "every_n_epochs": NonNegInt | None,
    },
}


# public names of EXTERNAL's classes, so their bounds are checked before torch is imported
PUBLIC = {
    "lightning.pytorch.Trainer": "lightning.pytorch.trainer.trainer.Trainer",
    "lightning.pytorch.callbacks.EarlyStopping": "lightning.pytorch.callbacks.early_stopping.EarlyStopping",
    "lightning.pytorch.callbacks.ModelCheckpoint": "lightning.pytorch.callbacks.model_checkpoint.ModelCheckpoint",
}
OPTIMIZER, SCHEDULER = "torch.optim.optimizer.Optimizer", "torch.optim.lr_scheduler.LRScheduler"


def table(names: list[str]) -> dict:
    """The annotations EXTERNAL gives a class known by `names` (its MRO's "module.QualName"s,
    or the target's name alone, before any import): subclasses' entries win."""
    found = {}
    for name in reversed(names):
        name = PUBLIC.get(name, name)
        if name.startswith("torch.optim.lr_scheduler."):
            found.update(EXTERNAL[SCHEDULER])
        elif name.startswith("torch.optim.") and name.count(".") == 2:
            found.update(EXTERNAL[OPTIMIZER])
        found.update(EXTERNAL.get(name, {}))
    return found
