"""The task kinds: the one vocabulary every layer shares. Each module of this package
declares one kind (`KIND`, a `TaskKind`): its metrics, how it is exported and served, which
inspect callbacks and compression steps apply, how federated partitions read its labels. A
datamodule names its kind (`kind = IMAGE_CLASSIFICATION`), a LightningModule the kinds it fits
(`kinds = (...)`). A new kind is one module here (docs/new_task.md): nothing else lists kinds.

Nothing here imports torch: `kind_of_data` and `kinds_of_model` read a class's declaration from
its source when they can, so a model/data mismatch is told in about a second.
"""

import importlib
import pkgutil

from litlab.errors import UserError
from litlab.tasks.kind import TaskKind

IMAGE_CLASSIFICATION = "image_classification"
VOLUME_CLASSIFICATION = "volume_classification"
VOLUME_SEGMENTATION = "volume_segmentation"
NODE_CLASSIFICATION = "node_classification"
GRAPH_CLASSIFICATION = "graph_classification"

_KINDS: dict[str, TaskKind] = {}


def kinds() -> dict[str, TaskKind]:
    """Every kind declared in this package, by name."""
    if not _KINDS:
        for info in pkgutil.iter_modules(__path__):
            if info.name == "kind" or info.name.startswith("_"):
                continue
            kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
            if isinstance(kind, TaskKind):
                _KINDS[kind.name] = kind
    return _KINDS


def get(name: str) -> TaskKind:
    known = kinds()
    if name not in known:
        raise UserError(f"unknown task kind {name!r}; litlab knows {', '.join(sorted(known))}")
    return known[name]


def kind_name_of_data(target: str, key: str = "data") -> str:
    """The kind name a datamodule class (by dotted name) declares (`kind = ...`)."""
    from litlab.tasks.static import class_attribute

    return class_attribute(target, "kind", key)


def kind_of_data(target: str, key: str = "data") -> TaskKind:
    """The kind of a datamodule class given by its dotted name."""
    return get(kind_name_of_data(target, key))


def of(declaring) -> TaskKind:
    """The kind a datamodule (or an export Spec) names in its `kind` attribute."""
    return get(declaring.kind)


def kinds_of_model(target: str, key: str = "model") -> tuple[str, ...]:
    """The kinds a LightningModule class fits, by its dotted name."""
    from litlab.tasks.static import class_attribute

    return tuple(class_attribute(target, "kinds", key))
