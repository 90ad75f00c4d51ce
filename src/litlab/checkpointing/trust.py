"""What a checkpoint's stored config may make litlab build.

`weights_only=True` keeps pickled code out of a checkpoint, but eval.py and `load_run` then
instantiate the config stored inside it: a crafted `_target_: shutil.copy` would run. So a
stored config may name only what litlab's own configs can name: litlab's classes and
functions, and the classes of the libraries it builds from (`ALLOWED`). Anything else is
refused in one line, naming the target, unless the user trusts the file
(`trust_checkpoint=true` for eval.py, `load_run(..., trust=True)`).

The name is checked before anything is imported, and the object it resolves to is checked
again (`litlab.x.os.remove` resolves to `os.remove`, which is refused).
"""

import inspect

from litlab.errors import UserError

# packages whose classes a stored config may instantiate (litlab's functions too)
ALLOWED = (
    "litlab.",
    "torch.optim.",
    "torch.nn.",
    "lightning.pytorch.",
    "torchmetrics.",
    "torch_geometric.nn.",
    "monai.networks.",
    "torchvision.models.",
    "optuna.samplers.",
    "optuna.pruners.",
    "flwr.serverapp.strategy.",  # federate.strategy (federated runs' global checkpoints)
    "aim.pytorch_lightning.",  # logger=aim (an optional install)
)
TRUST_HINT = "pass trust_checkpoint=true (eval.py) or load_run(..., trust=True) if you trust it"


def targets(node, path: str = ""):
    """(key, `_target_`) pairs anywhere in a plain config."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield f"{path}._target_".lstrip("."), node["_target_"]
        for k, v in node.items():
            yield from targets(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from targets(v, f"{path}[{i}]")


def _allowed_name(name: str) -> bool:
    return any(name.startswith(p) for p in ALLOWED)


def allowed(name) -> bool:
    """The name is in an allowed package, and so is what it resolves to (a class, or a
    function of litlab's)."""
    if not isinstance(name, str) or not _allowed_name(name):
        return False
    import hydra

    try:
        obj = hydra.utils.get_object(name)
    except Exception:  # noqa: BLE001
        return True  # importable or not, it is in litlab's packages: build reports the error
    module = f"{getattr(obj, '__module__', '')}."
    if not _allowed_name(module):
        return False
    return inspect.isclass(obj) or module.startswith("litlab.")


def check_targets(config: dict, source: str) -> None:
    """Refuse a stored config that names a target outside the allowlist."""
    for key, name in targets({k: v for k, v in config.items() if k != "hydra"}):
        if not allowed(name):
            raise UserError(
                f"ckpt_path={source}: its stored config names {key}={name}, which "
                f"litlab does not build from a checkpoint (allowed: litlab and "
                f"{', '.join(p.rstrip('.') for p in ALLOWED[1:])}); {TRUST_HINT}"
            )
