"""Checks a config node against the Python signature it will be instantiated with: known keys
(with the closest valid one), value types from the annotations, and bounds from
`typing.Annotated` metadata (annotated_types' Ge, Gt, Le, Lt, Interval, MinLen; a plain string
in the metadata is the text shown to the user), judged by pydantic (`accepts`) as the
settings models are. Generic, so it covers every domain's classes without a list per class;
`validate` uses it.

The checks come from the targets themselves, never from key names: a litlab class annotates
its parameters, and may declare a classmethod `check_settings(settings, key)` for rules that
span parameters (fold < num_folds). Classes litlab does not own (torch optimizers, Lightning's
Trainer and callbacks) get their bounds from `EXTERNAL` (config/external.py), keyed by class
and inherited by subclasses. Every float is finite (`accepts` refuses nan and inf for every
float annotation), and rates and factors have an upper bound: `lr=1e30` fails here, not after
the first step.
"""

import collections.abc
import difflib
import functools
import inspect
import re
import types
import typing
from typing import Annotated, Literal

import annotated_types as at

# the bounds of other libraries' classes, kept beside (re-exported: `signatures.EXTERNAL`)
from litlab.config.external import EXTERNAL, PUBLIC, bounds_by_name  # noqa: F401

#: as the settings models (`config.settings.Settings`): no coercion, no nan or inf (pydantic's
#: ConfigDict is a plain dict; pydantic itself is imported when a value is judged, not when
#: Hydra's errors are condensed at start-up)
_STRICT = {"strict": True, "allow_inf_nan": False}


def fmt(value) -> str:
    """A value as the user would type it on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) and (not value or " " in value) else str(value)


def closest(word: str, options) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return f"; did you mean {match[0]}?" if match else ""


def _external(target) -> dict:
    found = {}
    for cls in reversed(getattr(target, "__mro__", ())):  # subclasses' entries win
        found.update(EXTERNAL.get(f"{cls.__module__}.{cls.__qualname__}", {}))
    return found


def signature(target) -> tuple[dict, dict, bool]:
    """(annotations, defaults, open_ended) of a class's constructor (following litlab's
    **kwargs up the MRO) or a function's parameters."""
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
        except Exception:
            hints = {}
        for name, p in sig.parameters.items():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self":
                params.setdefault(name, hints.get(name, inspect.Parameter.empty))
                if p.default is not p.empty:
                    defaults.setdefault(name, p.default)
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            open_ended = False
            break
        if not getattr(fn, "__module__", "").startswith("litlab."):
            # third-party **kwargs may go anywhere (DDPStrategy's go to DistributedDataParallel);
            # litlab's own classes pass theirs to the base class, so keep following those
            break
    for name, ann in _external(target).items():
        if name in params:
            params[name] = ann
    return params, defaults, open_ended


def _no_scalar(value):
    if isinstance(value, (str, bool, list, dict)):
        raise ValueError("a config scalar is never a tensor (lr=fast)")  # noqa: TRY004 (pydantic)
    return value


def _form(ann):
    """`ann` as pydantic should judge a config's plain values against it: classes a config
    cannot hold as a value (nets, callables, paths: built from a `_target_` node or converted
    by the constructor) take anything; a list or tuple takes either (YAML has only lists)."""
    if ann in (inspect.Parameter.empty, typing.Any):
        return typing.Any
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Annotated:
        return Annotated[(_form(args[0]), *args[1:])]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_form(a) for a in args)]  # noqa: UP007 (of a tuple)
    if origin is Literal or ann in (int, float, str, bool, type(None)):
        return ann
    if ann in (list, tuple) or origin in (list, tuple, typing.Sequence, collections.abc.Sequence):
        if origin is tuple and len(args) > 1 and args[1] is not ...:
            return typing.Any  # a fixed-length tuple: its constructor judges it
        item = _form(args[0]) if args else typing.Any
        return list[item] | tuple[item, ...]  # strict: a str is no list
    if ann is dict or origin is dict:
        return dict
    if getattr(ann, "__name__", "") == "Tensor":
        from pydantic import AfterValidator

        return Annotated[typing.Any, AfterValidator(_no_scalar)]
    return typing.Any


@functools.lru_cache(maxsize=1024)
def _adapter(ann):
    from pydantic import TypeAdapter

    return TypeAdapter(_form(ann), config=_STRICT)


def accepts(value, ann) -> bool:
    """Whether `value` (plain, resolved config data) is valid for the annotation `ann`: its
    type, strictly (`lr=fast`, `dropout=true` are refused, never coerced), and its bounds;
    nan and inf for no float. pydantic judges (a TypeAdapter per annotation, cached); an
    annotation it cannot judge (metadata it has no rule for) leaves the value to the
    constructor, as a class does."""
    from pydantic import PydanticUserError, ValidationError

    try:
        try:
            adapter = _adapter(ann)
        except TypeError:  # an unhashable annotation: not cached
            adapter = _adapter.__wrapped__(ann)
    except PydanticUserError:  # schema errors (PydanticSchemaGenerationError is one)
        return True
    try:
        adapter.validate_python(value)
    except (ValidationError, TypeError):  # TypeError: a bound compared with another type
        return False
    return True


def _element(ann):
    args = typing.get_args(ann)
    return args[0] if args else inspect.Parameter.empty


def _bound_text(b) -> str:
    if isinstance(b, at.Interval):
        lo = b.ge if b.ge is not None else b.gt
        hi = b.le if b.le is not None else b.lt
        if lo is not None and hi is not None:
            inc = [
                f"{lo} included" if b.ge is not None else "",
                f"{hi} included" if b.le is not None else "",
            ]
            inc = [s for s in inc if s]
            return f"between {lo} and {hi}" + (f" ({', '.join(inc)})" if inc else " (exclusive)")
        return " ".join(_bound_text(x) for x in b)
    for cls, attr, text in (
        (at.Gt, "gt", "> {}"),
        (at.Ge, "ge", ">= {}"),
        (at.Lt, "lt", "< {}"),
        (at.Le, "le", "<= {}"),
        (at.MinLen, "min_length", "with at least {} entries"),
        (at.MaxLen, "max_length", "with at most {} entries"),
        (at.MultipleOf, "multiple_of", "a multiple of {}"),
    ):
        if isinstance(b, cls):
            return text.format(getattr(b, attr)).replace(" 1 entries", " 1 entry")
    return ""


def describe(ann) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Annotated:
        text = [m for m in args[1:] if isinstance(m, str)]
        if text:
            return text[0]
        bounds = " and ".join(filter(None, (_bound_text(b) for b in args[1:])))
        bounds = re.sub(
            r"with at least (\d+) entries and with at most \1 entries",
            r"with exactly \1 entries",
            bounds,
        )
        return f"{describe(args[0])} {bounds}".strip()
    if origin in (typing.Union, types.UnionType):
        if all(typing.get_origin(a) is Literal or a is type(None) for a in args):
            values = [v for a in args for v in (typing.get_args(a) or [None])]
            return ", ".join(dict.fromkeys("null" if v is None else str(v) for v in values))
        return " or ".join(dict.fromkeys(describe(a) for a in args))
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if ann is type(None):
        return "null"
    if ann is bool:
        return "true or false"
    if ann is int:
        return "an integer"
    if ann is float:
        return "a number"
    if ann in (list, tuple) or origin in (list, tuple, typing.Sequence):
        item = _element(ann)
        if item is inspect.Parameter.empty or item is ...:
            return "a list"
        text = describe(item)
        for one, many in (("an integer", "integers"), ("a number", "numbers")):
            text = text.replace(one, many, 1) if text.startswith(one) else text
        return f"a list of {text}"
    if ann is dict or origin is dict:
        return "a group of keys"
    return getattr(ann, "__name__", str(ann))
