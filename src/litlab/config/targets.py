"""The checks of config nodes with a `_target_`, generic so every domain's classes are covered
without lists per key name: the target imports, every key is a parameter of it (else the closest
valid one), values match the annotations' types and bounds (`config.signatures`), then the
class's own `check_settings(settings, key)` hook. `walk_plain` first checks what is known from a
target's name alone (`signatures.EXTERNAL`), without importing it.
"""

import re

from litlab.config.signatures import accepts, bounds_by_name, describe, signature
from litlab.config.signatures import closest as _closest
from litlab.config.signatures import fmt as _fmt
from litlab.errors import UserError, one_line

_RAW: dict = {}  # the unresolved config, to say where an interpolated value came from


def remember_raw(raw: dict) -> None:
    """The unresolved config of the run being checked (see `refuse`)."""
    global _RAW
    _RAW = raw


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


def refuse(key: str, value, ann) -> None:
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


def _import(path: str, target_name: str):
    import hydra

    try:
        return hydra.utils.get_object(target_name)
    except Exception as err:
        raise UserError(
            f"{path}._target_={target_name} cannot be imported: {one_line(err)}"
        ) from None


def check_node(path: str, node: dict) -> None:
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
            check_node(key, value)
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict) and "_target_" in item:
                    check_node(f"{key}[{i}]", item)
        if name in params and not accepts(value, params[name]):
            refuse(key, value, params[name])
    hook = getattr(target, "check_settings", None)
    if callable(hook):
        settings = {**defaults, **{k: v for k, v in node.items() if not k.startswith("_")}}
        try:
            hook(settings, path)
        except UserError:
            raise
        except Exception as err:
            raise UserError(f"{path} ({target_name}): {one_line(err)}") from None


def walk_plain(path: str, node) -> None:
    """The bounds known from a target's name alone (signatures.bounds_by_name): no import, so
    the common mistakes (epochs, learning rate, patience) fail in about a second."""
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            for name, ann in bounds_by_name(node["_target_"]).items():
                if name in node and not accepts(node[name], ann):
                    refuse(f"{path}.{name}", node[name], ann)
        for k, v in node.items():
            walk_plain(f"{path}.{k}" if path else str(k), v)


def walk(path: str, node) -> None:
    if isinstance(node, dict):
        if "_target_" in node:
            check_node(path, node)
            return
        for k, v in node.items():
            walk(f"{path}.{k}" if path else str(k), v)


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
