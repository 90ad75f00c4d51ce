"""Bounds for the classes of other libraries (torch optimizers and schedulers, Lightning's
Trainer and callbacks, Flower strategies), keyed by class and inherited by subclasses: the
annotations those libraries would carry if they were stricter (`config.models` applies
them). Every float is finite (`config.models`); rates and factors are bounded above, so
`lr=1e30` or `momentum=2` fail before anything is built, not after the first step.
"""

from typing import Annotated, Literal

import annotated_types as at

from litlab.bounds import LearningRate, MinMax, NonNegFloat, NonNegInt, PosInt

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

# Bounds for the classes of other libraries, by "module.QualName" (no import needed here).
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
