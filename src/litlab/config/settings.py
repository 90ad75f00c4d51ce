"""The settings an entry point owns itself (export's `rtol`, serve's `port`, `federate.*`,
`compress.prune.*`), declared as pydantic models where the setting lives and checked here, by
the same rules and with the same one-line messages as the `_target_` nodes of `validate`.

    class LatencySettings(Settings):
        batch_sizes: list[PosInt] = [1, 64]
        budget_s: PosFloat = 3.0

Fields are annotated with `litlab.bounds` (pydantic reads annotated_types' bounds; the string
in the metadata is the text the user sees); rules across keys go in a
`@model_validator(mode="after")` that raises `UserError`; checks of the files and resources
the settings name in `check_files` (that they are there at all, before any import, in
`check_files_exist`). Strict: `rtol=abc` or `workers=true`
is refused, never coerced; nan and inf are refused for every float (`allow_inf_nan=False`,
inherited: a subclass's `model_config` is merged into this one). Unknown keys are refused
with the closest valid one.
"""

import typing
from typing import Annotated

from pydantic import BaseModel, ConfigDict, ValidationError

from litlab.config.signatures import closest, describe, fmt
from litlab.errors import UserError


class Settings(BaseModel):
    """Base of every entry point's settings: strict types, no unknown keys, read-only."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    def run_view(self, cfg):
        """The config the run will see, checked after these settings (compress: the
        checkpoint's model and data join this command's trainer and callbacks)."""
        return cfg

    def check_kind(self, kind) -> None:
        """Rules of these settings on the data's task kind (`litlab.tasks.Kind`), for
        entry points with a data group; raise `UserError`."""

    def check_groups(self, config: dict) -> None:
        """Rules of these settings across the run's groups (`config`: plain, resolved, every
        target checked); raise `UserError`."""

    def check_files_exist(self) -> None:
        """The files the settings name are there: checked before any target is imported (a
        path to nothing is told in a second, not after torch's seconds); raise `UserError`."""

    def check_files(self) -> None:
        """What the settings name outside the config (files, ports): checked after every key
        of the config is (pure config errors come first, and fast); raise `UserError`."""


def _annotation(model: type[BaseModel], loc: tuple):
    """The annotation (bounds included) of the field at `loc`, or None."""
    ann = model
    for part in loc:
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(str(part))
            if field is None:
                return None
            ann = field.annotation
            if field.metadata:
                ann = Annotated[(ann, *field.metadata)]
            continue
        while typing.get_origin(ann) is Annotated:
            ann = typing.get_args(ann)[0]
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if typing.get_origin(ann) in (list, tuple) and isinstance(part, int) and args:
            ann = args[0]
        elif typing.get_origin(ann) is dict and len(args) == 2:
            ann = args[1]
        elif len(args) == 1 or (args and all(isinstance(a, type) for a in args)):
            # Optional[Model] / Model | None: descend into the model by its field name
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            if not models:
                return None
            ann = models[0]
            return _annotation(ann, (part,))  # pydantic names the union member in loc
        else:
            return None
    return ann


def _fields(model: type[BaseModel], loc: tuple) -> list[str]:
    ann = _annotation(model, loc) if loc else model
    while typing.get_origin(ann) is Annotated:
        ann = typing.get_args(ann)[0]
    for a in (ann, *typing.get_args(ann)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return list(a.model_fields)
    return []


def _key(prefix: str, loc: tuple) -> str:
    key = prefix
    for part in loc:
        key = f"{key}[{part}]" if isinstance(part, int) else f"{key}.{part}" if key else str(part)
    return key


def _union_member(part) -> bool:
    return isinstance(part, str) and (part[:1].isupper() or bool(set(part) & set("-['")))


def _message(model: type[BaseModel], error: dict, prefix: str) -> str:
    # pydantic puts a union's member into loc ('prune', 'PruneSettings', ...; 'local_epochs',
    # 'constrained-int' or "literal['auto']"): drop it
    loc = tuple(p for p in error["loc"] if not _union_member(p))
    key = _key(prefix, loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        options = _fields(model, loc[:-1])
        return f"unknown key {key}{closest(str(loc[-1]), options)}" + (
            f" (valid: {', '.join(options)})" if options and len(options) <= 8 else ""
        )
    if kind == "missing":
        return f"{key} is required: add {key}=VALUE to the command"
    ann = _annotation(model, loc)
    valid = describe(ann) if ann is not None else error["msg"]
    if kind == "model_type":  # a group of keys was given as one value (`federate.dp=5`)
        valid = f"a group of keys ({', '.join(_fields(model, loc))})"
    value = error.get("input")
    if isinstance(value, dict):
        return f"{key} must be {valid}, not a group of keys"
    return f"{key}={fmt(value)} has the wrong type or value; valid: {valid}"


def check(model: type[BaseModel], values: dict, prefix: str = ""):
    """`values` (a plain, resolved dict) as an instance of `model`, or one line naming the
    first bad key (`prefix.key=value ...; valid: ...`)."""
    try:
        return model.model_validate(values)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        raise UserError(_message(model, first, prefix)) from None


class EntrySettings(Settings):
    """The keys every entry config has besides its own (configs/<entry>.yaml)."""

    task_name: str = ""
    tags: list[str] | None = None
