"""The kinds: the one vocabulary every layer shares. A kind is a class of this package (one
module each, entered by `@register_kind`, litlab.tasks.kind). A datamodule names its kind
(`kind = IMAGE_CLASSIFICATION`, or `MyKind.name`), a LightningModule the kinds it fits
(`kinds = (...)`). A new kind is one module here (docs/new_task.md): nothing else lists kinds.

Nothing here imports torch: a class attribute (`kind`, `kinds`) is read from the class's source
when it says it plainly (names resolved through the module's own constants and what it imports
from `litlab.tasks`; base classes followed into other litlab modules), else the class is
imported; so a model/data mismatch is told in about a second, not after the seconds a
datamodule's module takes to import torch.
"""

import ast
import functools
import importlib
import importlib.util
import pkgutil
from pathlib import Path

from litlab.errors import UserError, one_line
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
    return class_attribute(target, "kind", key)


def kind_of_data(target: str, key: str = "data") -> Kind:
    """The kind of a datamodule class given by its dotted name."""
    return get(kind_name_of_data(target, key))


def of(declaring) -> Kind:
    """The kind a datamodule (or an export Spec) names in its `kind` attribute."""
    return get(declaring.kind)


def kinds_of_model(target: str, key: str = "model") -> tuple[str, ...]:
    """The kinds a LightningModule class fits, by its dotted name."""
    return tuple(class_attribute(target, "kinds", key))


# ---------------------------------------------------------- static reads
_MISSING = object()  # the source does not say: import the class
_ABSENT = object()  # the source says the class and its bases do not declare it


@functools.lru_cache(maxsize=256)
def _parse(module: str):
    if not module.startswith("litlab."):  # finding another package's module may import it
        return None
    try:
        spec = importlib.util.find_spec(module)
        return ast.parse(Path(spec.origin).read_text())
    except Exception:  # noqa: BLE001 (any failure: the import below decides)
        return None


class _Resolver(ast.NodeTransformer):
    """Names and `NAME.attr` replaced by the constants they stand for."""

    def __init__(self, consts: dict, imported: dict):
        self.consts, self.imported = consts, imported

    def _value(self, name: str):
        if name in self.consts:
            return self.consts[name]
        origin = self.imported.get(name)
        if origin and origin.startswith("litlab.tasks"):  # light: no torch below it
            module, _, attr = origin.rpartition(".")
            return getattr(importlib.import_module(module), attr, _MISSING)
        return _MISSING

    def visit_Name(self, node):
        value = self._value(node.id)
        return node if value is _MISSING else ast.Constant(value)

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name):
            base = self._value(node.value.id)
            if base is not _MISSING and hasattr(base, node.attr):
                return ast.Constant(getattr(base, node.attr))
        return self.generic_visit(node)


def _static(dotted: str, name: str, depth: int = 0, outside=_MISSING):
    """The attribute as the source declares it, `_ABSENT`, or `_MISSING`; `outside`: what a
    base class from another package stands for."""
    module, _, cls_name = dotted.rpartition(".")
    tree = _parse(module)
    if tree is None or depth > 8:
        return _MISSING
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    consts, imported = {}, {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            if isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant):
                consts[n.targets[0].id] = n.value.value
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            imported |= {a.asname or a.name: f"{n.module}.{a.name}" for a in n.names}
    resolver = _Resolver(consts, imported)

    def lookup(cls_name: str, seen: set):
        if cls_name in seen:
            return _MISSING
        seen.add(cls_name)
        if cls_name not in classes:  # a base from another module
            origin = imported.get(cls_name)
            if origin and not origin.startswith("litlab.") and outside is not _MISSING:
                return outside
            return _static(origin, name, depth + 1, outside) if origin else _MISSING
        node = classes[cls_name]
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets = [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                try:
                    return ast.literal_eval(resolver.visit(stmt.value))
                except (ValueError, TypeError, SyntaxError):
                    return _MISSING
        unknown = False
        for base in node.bases:  # left to right, depth first: Python's order for these
            found = lookup(base.id, seen) if isinstance(base, ast.Name) else _MISSING
            if found is _MISSING:
                unknown = True
            elif found is not _ABSENT:
                return found
        return _MISSING if unknown else _ABSENT

    return lookup(cls_name, set())


def _imported(dotted: str, key: str):
    import hydra

    try:
        return hydra.utils.get_class(dotted)
    except Exception as err:  # noqa: BLE001
        where = f"{key}._target_={dotted}" if key else dotted
        raise UserError(f"{where} cannot be imported: {one_line(err)}") from None


def class_attribute(dotted: str, name: str, key: str = ""):
    """`dotted`'s class attribute `name`, from its source when it says it plainly, else by
    importing the class; `key` (the config node naming it) goes into the messages."""
    value = _static(dotted, name)
    if value is not _MISSING and value is not _ABSENT:
        return value
    cls = _imported(dotted, key)
    if not hasattr(cls, name):
        where = f"{key}._target_={dotted}" if key else dotted
        raise UserError(f"{where} declares no `{name}` (see docs/new_task.md)")
    return getattr(cls, name)


def declared(dotted: str, name: str, key: str = ""):
    """`dotted`'s class attribute `name`, None when it has none, for an attribute litlab
    defines (`inspects`): another package's base class cannot declare it, so a litlab class on
    Lightning's `Callback` is read without importing Lightning (seconds)."""
    value = _static(dotted, name, outside=_ABSENT)
    if value is _ABSENT:
        return None
    if value is not _MISSING:
        return value
    return getattr(_imported(dotted, key), name, None)
