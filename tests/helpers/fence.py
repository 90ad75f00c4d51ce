"""The scan behind tests/test_compat.py's fence: every `_name` of another library that litlab
reaches outside litlab/compat/.

A `_name` is litlab's own only where litlab defines it: in a litlab module's top level, or in a
litlab class (its body, or assigned on `self`/`cls` in its methods). On `self` it must be
defined by the class's own family (its litlab bases and subclasses), and by none of the other
libraries' classes that family inherits from: a subclass of Lightning's CSVLogger that sets
`self._experiment` sets Lightning's attribute, not one of its own. On any other object the
name must be defined somewhere in litlab and by no other library's class that a litlab class
inherits from (`module._trainer` is the LightningModule's). The same holds for the names that
`getattr`/`hasattr`/`setattr`/`delattr` are given as string literals, and a string naming a
private module of another library (`"hydra._internal.core_plugins..."`) is a reach too."""

import ast
import builtins
import functools
import importlib
import inspect
import re
import types
from dataclasses import dataclass, field
from pathlib import Path

# `_names` of the standard library that are public API, and litlab's own names that the scan
# cannot see defined (set through `__dict__`)
NOT_FOREIGN = {
    "_exit": "os._exit: the standard library's documented immediate exit",
    "_forward": "LitModule's own compiled-or-plain forward, set via __dict__ (models)",
    "_target_": "Hydra's documented key of the class a config node instantiates",
    "_replace": "a namedtuple's documented copy-with-changes",
    "_asdict": "a namedtuple's documented conversion to a dict",
    "_fields": "a namedtuple's documented field names",
}
ACCESSORS = {"getattr", "hasattr", "setattr", "delattr"}
OWN_ROOTS = ("litlab", "hydra_plugins")
DOTTED = re.compile(r"[A-Za-z_]\w*(\.\w+)+")


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_name(src: Path, path: Path) -> str:
    return ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")


@dataclass
class Klass:
    module: str
    qualname: str
    node: ast.ClassDef
    names: set = field(default_factory=set)  # private names it defines
    family_names: set = field(default_factory=set)  # and its litlab bases and subclasses


@dataclass
class Definitions:
    """What litlab defines, read from its source (and, for inheritance, from its classes)."""

    classes: dict = field(default_factory=dict)  # (module, qualname) -> Klass
    top_level: dict = field(default_factory=dict)  # module -> its top-level names
    imports: dict = field(default_factory=dict)  # module -> {alias: imported module}
    foreign: dict = field(default_factory=dict)  # (module, qualname) -> foreign names
    foreign_owner: dict = field(default_factory=dict)  # (module, qualname, name) -> owner

    @property
    def everywhere(self) -> set:
        return set().union(*self.top_level.values(), *(k.names for k in self.classes.values()))

    @property
    def inherited(self) -> set:
        """Private names that other libraries' base classes of litlab's classes define."""
        return set().union(*self.foreign.values())


def _class_names(node: ast.ClassDef) -> set:
    names = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}

    def assigned(parent):  # on self/cls in its methods, not in a class nested in it
        for sub in ast.iter_child_nodes(parent):
            if isinstance(sub, ast.ClassDef):
                continue
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.ctx, ast.Store)
                and isinstance(sub.value, ast.Name)
                and sub.value.id in ("self", "cls")
            ):
                names.add(sub.attr)
            assigned(sub)

    assigned(node)
    return {n for n in names if private(n)}


def _top_level(tree: ast.Module) -> tuple[set, dict]:
    """(the module's own private names, {name bound by an import: the module it binds})."""
    names, imports = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                first = a.name.split(".")[0]
                imports[a.asname or first] = a.name if a.asname else first

    def bound(parent):  # a function's or class's insides are not the module's names
        for sub in ast.iter_child_nodes(parent):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
                continue
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
            elif isinstance(sub, ast.alias):
                names.add((sub.asname or sub.name).split(".")[0])
            bound(sub)

    bound(tree)
    return {n for n in names if private(n)}, imports


@functools.cache  # a library class is in many litlab classes' families: its source read once
def _foreign_names(cls: type) -> dict:
    """{private name: cls's qualname} for what another library's class defines or assigns."""
    found = {n: cls.__qualname__ for n in vars(cls) if private(n)}
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return found
    for name in re.findall(r"\bself\.(_\w+)", source):
        if private(name):
            found.setdefault(name, cls.__qualname__)
    return found


def _family(cls: type) -> list:
    """cls and its bases, then every subclass (recursively) that litlab has imported with its
    bases, in that order (the first class that defines a name is named as its owner)."""
    family, todo = list(cls.__mro__), [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in family:
                family += [c for c in sub.__mro__ if c not in family]
                todo.append(sub)
    return family


def _own_class(cls: type) -> bool:
    return cls.__module__.split(".")[0] in OWN_ROOTS


def _resolve(expr, namespace: dict):
    """What a dotted name (`nn.modules.conv`, a base class `Generic[T]`) names in a module's
    namespace, or None: read, never evaluated."""
    if isinstance(expr, ast.Subscript):
        return _resolve(expr.value, namespace)
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id, getattr(builtins, expr.id, None))
    if isinstance(expr, ast.Attribute):
        return getattr(_resolve(expr.value, namespace), expr.attr, None)
    return None


def _class_object(defs: Definitions, key, cache: dict):
    """The class behind a Klass: imported by its qualname, or (defined in a function) a class
    built from its bases, evaluated in its module."""
    module, qualname = key
    if key in cache:
        return cache[key]
    mod = importlib.import_module(module)
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, type):
        bases = [_resolve(base, vars(mod)) for base in defs.classes[key].node.bases]
        bases = [base for base in bases if isinstance(base, type)]  # not the function's locals
        obj = type(qualname.split(".")[-1], tuple(bases) or (object,), {})
    cache[key] = obj
    return obj


def definitions(src: Path, files: list[Path], trees: dict) -> Definitions:
    defs = Definitions()
    for path in files:
        module, tree = module_name(src, path), trees[path]
        defs.top_level[module], defs.imports[module] = _top_level(tree)

        def visit(node, prefix, module=module):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    qualname = f"{prefix}{child.name}"
                    defs.classes[(module, qualname)] = Klass(
                        module, qualname, child, _class_names(child)
                    )
                    visit(child, f"{qualname}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(child, f"{prefix}{child.name}.<locals>.")
                else:
                    visit(child, prefix)

        visit(tree, "")
    cache = {}
    objects = {key: _class_object(defs, key, cache) for key in defs.classes}
    by_object = {}
    for key, obj in objects.items():
        by_object.setdefault(obj, []).append(key)
    for key, obj in objects.items():
        foreign = {}
        for member in _family(obj):
            if member is object or _own_class(member):
                continue
            for name, owner in _foreign_names(member).items():
                foreign.setdefault(name, f"{member.__module__}.{owner}")
        defs.foreign[key] = set(foreign)
        for name, owner in foreign.items():
            defs.foreign_owner[(*key, name)] = owner
        family_names = set()
        for member in _family(obj):
            for other in by_object.get(member, []):
                family_names |= defs.classes[other].names
        defs.classes[key].family_names = family_names
    return defs


def _docstrings(tree) -> set:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _private_module_string(text: str) -> bool:
    if "._internal" in text or "_internal." in text:
        return True
    if not DOTTED.fullmatch(text):
        return False
    parts = text.split(".")
    return not private(parts[0]) and parts[0] not in OWN_ROOTS and any(map(private, parts))


def _module_of(obj, namespace: dict, imports: dict) -> str | None:
    """The module an expression such as `nn.modules.conv` names, if it names one: read from
    the imported module (a function's own `import torch` from the source)."""
    value = _resolve(obj, namespace) if isinstance(obj, (ast.Name, ast.Attribute)) else None
    if isinstance(value, types.ModuleType):
        return value.__name__
    if isinstance(obj, ast.Name) and obj.id in imports:
        return imports[obj.id]
    return None


def reaches(path, module: str, tree: ast.Module, defs: Definitions) -> list[str]:
    """Every reach of another library's private name in one module: 'path:line: what'."""
    found = []
    anywhere = (defs.everywhere - defs.inherited) | set(NOT_FOREIGN)
    imports = defs.imports.get(module, {})
    namespace = vars(importlib.import_module(module))
    docstrings = _docstrings(tree)
    classes = {k.node: key for key, k in defs.classes.items() if k.module == module}

    def attribute(node, klass, obj, name: str, how: str):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if not private(name) or name in NOT_FOREIGN:
            return
        on_self = (isinstance(obj, ast.Name) and obj.id in ("self", "cls")) or (
            isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "super"
        )
        if on_self and klass is not None:
            key = classes[klass]
            if name in defs.foreign[key]:
                owner = defs.foreign_owner[(*key, name)]
                found.append(f"{where}: {how}{name} (defined by {owner})")
            elif name not in defs.classes[key].family_names and name not in anywhere:
                found.append(f"{where}: {how}{name}")
            return
        target = _module_of(obj, namespace, imports)
        if target is not None:
            if target.split(".")[0] not in OWN_ROOTS or name not in defs.top_level.get(target, ()):
                found.append(f"{where}: {how}{name} of {target}")
            return
        if name not in anywhere:
            found.append(f"{where}: {how}{name}")

    def visit(node, klass):
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.ClassDef) else klass
            where = f"{path}:{getattr(child, 'lineno', 0)}"
            if isinstance(child, ast.ClassDef):
                key = classes[child]
                for name in sorted(defs.classes[key].names & defs.foreign[key]):
                    owner = defs.foreign_owner[(*key, name)]
                    found.append(f"{where}: {key[1]}.{name} overrides {owner}'s")
            if isinstance(child, ast.Attribute):
                attribute(child, klass, child.value, child.attr, ".")
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id in ACCESSORS
                and len(child.args) >= 2
                and isinstance(child.args[1], ast.Constant)
                and isinstance(child.args[1].value, str)
            ):
                attribute(child, klass, child.args[0], child.args[1].value, f"{child.func.id} ")
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                if child.module.split(".")[0] not in OWN_ROOTS:
                    names = [*child.module.split("."), *(a.name for a in child.names)]
                    found.extend(
                        f"{where}: from {child.module} import {n}" for n in names if private(n)
                    )
            elif isinstance(child, ast.Import):
                found.extend(
                    f"{where}: import {a.name}"
                    for a in child.names
                    if any(private(part) for part in a.name.split("."))
                )
            elif (
                isinstance(child, ast.Constant)
                and isinstance(child.value, str)
                and id(child) not in docstrings
                and _private_module_string(child.value)
            ):
                found.append(f"{where}: {child.value!r}")
            visit(child, inner)

    visit(tree, None)
    return found
