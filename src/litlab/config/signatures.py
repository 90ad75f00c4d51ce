"""Checks a config node against the Python signature it will be instantiated with: known keys
(with the closest valid one) and value types from the annotations. Generic, so it covers every
domain's classes without a list per class; `validate` uses it."""
import difflib
import inspect
import types
import typing


def fmt(value) -> str:
    return repr(value) if isinstance(value, str) and (not value or " " in value) else str(value)


def closest(word: str, options) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return f"; did you mean {match[0]}?" if match else ""


def parameters(target) -> tuple[dict, bool]:
    """Named parameters of a class (following litlab's **kwargs up the MRO) or function; open-ended?"""
    params, fns = {}, [target]
    if inspect.isclass(target):
        fns = [c.__dict__["__init__"] for c in target.__mro__ if "__init__" in c.__dict__]
    for fn in fns:
        if fn is object.__init__:  # every __init__ above passed **kwargs on: open-ended
            break
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return params, True
        try:
            hints = typing.get_type_hints(inspect.unwrap(fn))
        except Exception:
            hints = {}
        for name, p in sig.parameters.items():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self":
                params.setdefault(name, hints.get(name, inspect.Parameter.empty))
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            return params, False
        if not getattr(fn, "__module__", "").startswith("litlab."):
            # third-party **kwargs may go anywhere (DDPStrategy's go to DistributedDataParallel);
            # litlab's own classes pass theirs to the base class, so keep following those
            return params, True
    return params, True


def conforms(value, ann) -> bool | None:
    """True/False when the annotation decides, None when it cannot (classes, callables)."""
    if ann in (inspect.Parameter.empty, typing.Any):
        return None
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (typing.Union, types.UnionType):
        results = [conforms(value, a) for a in args]
        return True if True in results else (None if None in results else False)
    if origin is typing.Literal:
        return value in args
    if ann is type(None):
        return value is None
    if ann is bool:
        return isinstance(value, bool)
    if ann is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if ann is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ann is str:
        return isinstance(value, str)
    if ann in (list, tuple) or origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if ann is dict or origin is dict:
        return isinstance(value, dict)
    return None


def describe(ann) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (typing.Union, types.UnionType):
        if all(typing.get_origin(a) is typing.Literal or a is type(None) for a in args):
            values = [v for a in args for v in (typing.get_args(a) or [None])]
            return ", ".join(dict.fromkeys("null" if v is None else str(v) for v in values))
        return " or ".join(dict.fromkeys(describe(a) for a in args))
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if ann is type(None):
        return "null"
    return getattr(ann, "__name__", str(ann))
