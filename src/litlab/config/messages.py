"""pydantic's errors as the lines a user reads, every one of a command:
`KEY=VALUE has the wrong type or value; valid: ...` (what is valid in words, from the
annotation's type, bounds or text), `unknown key KEY; did you mean ...?`, for an entry point's
settings and for every `_target_` node (`node_errors`, the nodes' models of `config.models`).
"""

import re
import types
import typing
from typing import Annotated, Literal

import annotated_types as at
from pydantic import BaseModel, ValidationError

from litlab.config.models import Node, import_target, node_model
from litlab.errors import UserError, closest, fmt, one_line


def node_errors(path: str, node, raw: dict, imported: bool = True) -> list[str]:
    """Every error of the `_target_` nodes in `node` (plain, resolved), in the config's order:
    values against their target's model, then the target's `check_settings`."""
    if isinstance(node, list):
        return [
            e for i, v in enumerate(node) for e in node_errors(f"{path}[{i}]", v, raw, imported)
        ]
    if not isinstance(node, dict):
        return []
    inner = [
        e
        for k, v in node.items()
        if not str(k).startswith("_")
        for e in node_errors(f"{path}.{k}" if path else str(k), v, raw, imported)
    ]
    if not isinstance(node.get("_target_"), str):
        return inner
    try:
        model = node_model(node["_target_"], imported)
    except UserError as err:
        return [f"{path}{err}"]
    values = {k: v for k, v in node.items() if not str(k).startswith("_") and not _built(v)}
    try:
        model.model_validate(values)
    except ValidationError as err:
        return messages(model, err, path, raw, values) + inner
    except TypeError as err:  # a bound compared with a value of another type
        return [f"{path} ({model.target}) has a value of the wrong type: {one_line(err)}"]
    hook = getattr(import_target(model.target), "check_settings", None) if imported else None
    if callable(hook) and not inner:
        try:
            hook({**model.defaults, **values}, path)
        except UserError as err:
            return [str(err)]
        except Exception as err:
            return [f"{path} ({model.target}): {one_line(err)}"]
    return inner


def _built(value) -> bool:
    return isinstance(value, dict) and "_target_" in value  # judged as a node of its own


def messages(model, err: ValidationError, prefix: str, raw=None, values=None) -> list[str]:
    """pydantic's errors as litlab's lines, one per key, in order (`raw`: the unresolved
    config, to name the key an interpolated value came from)."""
    lines = {}
    for error in err.errors(include_url=False):
        # pydantic puts a union's member into loc ('constrained-int', "literal['auto']"): drop it
        loc = error["loc"][:1] + tuple(p for p in error["loc"][1:] if not _union_member(p))
        if issubclass(model, Node) and loc and error["type"] != "extra_forbidden":
            loc, error = loc[:1], {**error, "input": values[loc[0]]}  # judged whole
        key = _key(prefix, loc)
        lines.setdefault(key, _message(model, error, loc, key, raw or {}))
    return list(dict.fromkeys(lines.values()))


def _message(model, error: dict, loc: tuple, key: str, raw: dict) -> str:
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden":
        if issubclass(model, Node):
            name = str(loc[-1])
            return (
                f"unknown key {key} ({model.target} takes no '{name}'){closest(name, model.shown)}"
            )
        options = _fields(model, loc[:-1])
        return f"unknown key {key}{closest(str(loc[-1]), options)}" + (
            f" (valid: {', '.join(options)})" if options and len(options) <= 8 else ""
        )
    if kind == "missing":
        return f"{key} is required: add {key}=VALUE to the command"
    ann = model.shown.get(str(loc[0])) if issubclass(model, Node) else _annotation(model, loc)
    valid = describe(ann) if ann is not None else error["msg"]
    if kind == "model_type":  # a group of keys was given as one value (`federate.dp=5`)
        valid = f"a group of keys ({', '.join(_fields(model, loc))})"
    if isinstance(value, dict):
        return f"{key} must be {valid}, not a group of keys"
    key, used = _source(raw, key)
    return f"{key}={fmt(value)} has the wrong type or value; valid: {valid}{used}"


def _source(raw: dict, key: str) -> tuple[str, str]:
    """(the key the user set, where its value is used): for a value
    interpolated from another key (`mode: ${model.monitor_mode}`), that key."""
    node = raw
    for part in key.replace("]", "").replace("[", ".").split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            node = None
    found = re.fullmatch(r"\$\{([\w.]+)\}", node) if isinstance(node, str) else None
    if found:
        return found.group(1), f" (used as {key})"
    if isinstance(node, str) and "${" in node:
        return key, f" (set from {node})"
    return key, ""


def _union_member(part) -> bool:
    return isinstance(part, str) and (part[:1].isupper() or bool(set(part) & set("-['")))


def _key(prefix: str, loc: tuple) -> str:
    key = prefix
    for part in loc:
        key = f"{key}[{part}]" if isinstance(part, int) else f"{key}.{part}" if key else str(part)
    return key


def _annotation(model: type[BaseModel], loc: tuple):
    """The annotation (bounds included) of a settings model's field at `loc`, or None."""
    ann = model
    for part in loc:
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(str(part))
            if field is None:
                return None
            ann = field.rebuild_annotation()  # its bounds included
            continue
        while typing.get_origin(ann) is Annotated:
            ann = typing.get_args(ann)[0]
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if typing.get_origin(ann) in (list, tuple) and isinstance(part, int) and args:
            ann = args[0]
        elif typing.get_origin(ann) is dict and len(args) == 2:
            ann = args[1]
        else:  # Model | None: into the model by its field name
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            return _annotation(models[0], (part,)) if models else None
    return ann


def _fields(model: type[BaseModel], loc: tuple) -> list[str]:
    ann = _annotation(model, loc) if loc else model
    while typing.get_origin(ann) is Annotated:
        ann = typing.get_args(ann)[0]
    for a in (ann, *typing.get_args(ann)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return list(a.model_fields)
    return []


def validated(model: type[BaseModel], values: dict, prefix: str = "", raw=None):
    """(`values` as an instance of `model` or None, the lines of its errors)."""
    try:
        return model.model_validate(values), []
    except ValidationError as err:
        return None, messages(model, err, prefix, raw)


def check_model(model: type[BaseModel], values: dict, prefix: str = ""):
    """`values` (plain, resolved) as an instance of `model`, or one line (`refusal`)."""
    instance, errors = validated(model, values, prefix)
    refuse(errors)
    return instance


def refuse(errors: list[str]) -> None:
    """Raise the command's errors, if any, as one line (`refusal`)."""
    if errors:
        raise refusal(errors)


def refusal(errors: list[str]) -> UserError:
    """Every error of a command in one line: the first as it reads alone, then the others."""
    # one line per key: a value also refused where it is interpolated is told once
    keys = [e.split(" has the wrong type or value")[0] for e in errors]
    errors = [e for i, e in enumerate(errors) if keys[i] not in keys[:i]]
    rest = f" (and {len(errors) - 1} more: {'; '.join(errors[1:])})" if len(errors) > 1 else ""
    return UserError(errors[0] + rest)


def _bound_text(b) -> str:
    if isinstance(b, at.Interval):
        lo, hi = (b.ge if b.ge is not None else b.gt), (b.le if b.le is not None else b.lt)
        if lo is None or hi is None:
            return " ".join(_bound_text(x) for x in b)
        inc = [f"{lo} included" * (b.ge is not None), f"{hi} included" * (b.le is not None)]
        inc = ", ".join(s for s in inc if s)
        return f"between {lo} and {hi}" + (f" ({inc})" if inc else " (exclusive)")
    for cls, attr, text in (
        (at.Gt, "gt", "> {}"),
        (at.Ge, "ge", ">= {}"),
        (at.Lt, "lt", "< {}"),
        (at.Le, "le", "<= {}"),
        (at.MinLen, "min_length", "with at least {} entries"),
        (at.MaxLen, "max_length", "with at most {} entries"),
    ):
        if isinstance(b, cls):
            return text.format(getattr(b, attr)).replace(" 1 entries", " 1 entry")
    return ""


def describe(ann) -> str:
    """What is valid for `ann`, in words: its text if it has one, else from its type and bounds."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Annotated:
        if text := [m for m in args[1:] if isinstance(m, str)]:
            return text[0]
        bounds = " and ".join(filter(None, (_bound_text(b) for b in args[1:])))
        bounds = re.sub(r"with at least (\d+) entries and with at most \1 entries",
                        r"with exactly \1 entries", bounds)  # fmt: skip
        return f"{describe(args[0])} {bounds}".strip()
    if origin in (typing.Union, types.UnionType):
        if all(typing.get_origin(a) is Literal or a is type(None) for a in args):
            values = [v for a in args for v in (typing.get_args(a) or [None])]
            return ", ".join(dict.fromkeys("null" if v is None else str(v) for v in values))
        return " or ".join(dict.fromkeys(describe(a) for a in args))
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    words = {type(None): "null", bool: "true or false", int: "an integer", float: "a number"}
    if ann in words:
        return words[ann]
    if ann in (list, tuple) or origin in (list, tuple, typing.Sequence):
        if not args or args[0] is ...:
            return "a list"
        text = describe(args[0])
        for one, many in (("an integer", "integers"), ("a number", "numbers")):
            text = text.replace(one, many, 1) if text.startswith(one) else text
        return f"a list of {text}"
    return (
        "a group of keys" if ann is dict or origin is dict else getattr(ann, "__name__", str(ann))
    )
