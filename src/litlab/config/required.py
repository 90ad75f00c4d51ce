"""The nodes an entry point builds from (`trainer`, `model`, `model.optimizer`, `data`, ...):
deleted on the command line (`~data`), set to null or left without their `_target_`, they are
refused in one line naming them, before anything reads them (else the first read is a
traceback, after the run dir is made). `config.validate` calls `check` first."""

from omegaconf import DictConfig, OmegaConf

from litlab.errors import UserError

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


def check(cfg: DictConfig, entry: str) -> None:
    """Each of the entry point's REQUIRED nodes is a group of keys (with a `_target_` where it
    is built), or one line naming it and what is valid."""
    for key in REQUIRED[entry]:
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
            who = f"src/{entry}.py" if entry != "entry" else "this command"
            what = "a group of keys with a _target_" if built else "a group of keys"
            raise UserError(
                f"{key} is required by {who} (deleted with ~{key}, or not {what}): drop that "
                f"override; valid: {WHAT.get(key, f'the {key} node of its config')}"
            )
