"""The kinds: the one vocabulary every layer shares. A kind is a class of this package (one
module each, entered by `@register_kind`): its declarations are class attributes (its metrics, which
inspect callbacks and compression steps apply), its behaviour methods that the layers after
training call (how export reads a run, how the service decodes a request, the units federated
clients hold, the samples figure), shared through input and output mixins (litlab.tasks.kind).
A datamodule names its kind (`kind = IMAGE_CLASSIFICATION`, or `MyKind.name`), a
LightningModule the kinds it fits (`kinds = (...)`). A new kind is one module here
(docs/new_task.md): nothing else lists kinds.

Nothing here imports torch: `kind_of_data` and `kinds_of_model` read a class's declaration from
its source when they can, so a model/data mismatch is told in about a second.
"""

import importlib
import pkgutil

from litlab.errors import UserError
from litlab.tasks.kind import Kind, register_kind, registered

__all__ = ["Kind", "register_kind"]

IMAGE_CLASSIFICATION = "image_classification"
IMAGE_SEGMENTATION = "image_segmentation"
VOLUME_CLASSIFICATION = "volume_classification"
VOLUME_SEGMENTATION = "volume_segmentation"
NODE_CLASSIFICATION = "node_classification"
GRAPH_CLASSIFICATION = "graph_classification"

_DISCOVERED: list[bool] = []


def kinds() -> dict[str, Kind]:
    """Every kind declared in this package, by name (its modules imported once: light)."""
    if not _DISCOVERED:
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_"):  # a module without a kind registers none
                importlib.import_module(f"{__name__}.{info.name}")
        _DISCOVERED.append(True)
    return registered()


def get(name: str) -> Kind:
    known = kinds()
    if name not in known:
        raise UserError(f"unknown task kind {name!r}; litlab knows {', '.join(sorted(known))}")
    return known[name]


def kind_name_of_data(target: str, key: str = "data") -> str:
    """The kind name a datamodule class (by dotted name) declares (`kind = ...`)."""
    from litlab.tasks.static import class_attribute

    return class_attribute(target, "kind", key)


def kind_of_data(target: str, key: str = "data") -> Kind:
    """The kind of a datamodule class given by its dotted name."""
    return get(kind_name_of_data(target, key))


def of(declaring) -> Kind:
    """The kind a datamodule (or an export Spec) names in its `kind` attribute."""
    return get(declaring.kind)


def kinds_of_model(target: str, key: str = "model") -> tuple[str, ...]:
    """The kinds a LightningModule class fits, by its dotted name."""
    from litlab.tasks.static import class_attribute

    return tuple(class_attribute(target, "kinds", key))
