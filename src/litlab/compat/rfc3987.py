"""rfc3987-syntax, which litlab never calls, imported on first use (checked against
rfc3987-syntax 1.1.0 and jsonschema 4.26.0).

Why: `import jsonschema` imports `rfc3987_syntax` wherever it is installed (jupyterlab's
jupyter-events asks for `jsonschema[format-nongpl]`, so requirements.lock has it), and
rfc3987-syntax 1.1.0 builds some 35 Earley parsers of the RFC 3987 grammar at import: 1.8-3.4 s
of CPU on a 2-core machine, in every process that imports MONAI (`import monai` imports
`monai.bundle`, which imports jsonschema) or Ray, for the `iri` format checks of JSON Schema
that no litlab path makes. Upstream knows (python-jsonschema/jsonschema issues 1392 and 1428;
the fork rfc3987-syntax2 loads lazily but is not what jsonschema asks for).

`defer()` puts a stand-in for the package in `sys.modules` before anything imports jsonschema:
jsonschema registers its `iri` checkers on the stand-in's `is_valid_syntax`, and that call, or
reading any other name of the package, imports the real one, which answers from then on.
Submodules import from the package's own folder. What a user of the package sees is the same;
only the grammar is built when an IRI is first checked instead of at start-up.
"""

import importlib
import importlib.machinery
import sys

CHECKED_WITH = "1.1.0"
NAME = "rfc3987_syntax"


class _Deferred(type(sys)):  # a module (`types` is not imported yet at `import litlab`)
    """The package before its first use: a name the real one holds comes from it; any other
    is missing, as it is there. Tools look names up in every module of `sys.modules` (pickle's
    and cloudpickle's `whichmodule`, for a function they pickle: a job of the parallel
    launcher, sending its result back, built the grammar that way, 1.6 s a job)."""

    def __getattr__(self, attr: str):
        if attr == "__all__":  # `from rfc3987_syntax import *`: the real package's names
            return [name for name in vars(_real()) if not name.startswith("_")]
        names = _names(self.__path__[0])
        if attr.startswith("__") or names is not None and attr not in names:
            raise AttributeError(f"module {NAME!r} has no attribute {attr!r}")
        return getattr(_real(), attr)


_read: dict[str, set[str] | None] = {}  # the package's folder -> the names it will hold


def _names(folder: str) -> set[str] | None:
    """The names the real package will hold, read from its files without running them (running
    them is the cost): what its `__init__` binds, a `from .module import *` followed into that
    module (its public names), and its submodules. None where the files do not say it plainly
    (a name bound under an `if` or a `try`, a star import from elsewhere, a module-level
    `__getattr__`, a file that cannot be read or parsed): then every name loads the package."""
    if folder not in _read:
        import os

        try:
            names = {  # its submodules: .py files, and folders that are packages
                f.removesuffix(".py")
                for f in os.listdir(folder)
                if f.endswith(".py") or os.path.isfile(os.path.join(folder, f, "__init__.py"))
            } - {"__init__"}
            todo, seen = [("__init__", False)], set()
            while todo and names is not None:
                module, starred = todo.pop()
                seen.add(module)
                bound = _bound(_source(folder, module), starred)
                if bound is None:
                    names = None
                    break
                names.update(bound[0])
                todo += [(m, True) for m in bound[1] if m not in seen]
        except (OSError, SyntaxError, ValueError):
            names = None
        _read[folder] = names
    return _read[folder]


def _source(folder: str, module: str) -> str:
    """The text of `module` of the package in `folder` (a file, or a subpackage's __init__)."""
    import os

    path = os.path.join(folder, f"{module}.py")
    if not os.path.isfile(path):
        path = os.path.join(folder, module, "__init__.py")
    with open(path, encoding="utf-8") as file:
        return file.read()


def _bound(source: str, starred: bool) -> tuple[set[str], list[str]] | None:
    """(the names a module's top level binds, the modules it star-imports from this package),
    or None where it binds names in a way this reading does not follow."""
    import ast

    names, starred_from = set(), []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
            dots = node.level  # `from .module import *`: one dot, this package
            if dots != 1 or node.module is None:
                return None
            starred_from.append(node.module)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not all(isinstance(t, ast.Name) for t in targets):
                return None
            bound = [t.id for t in targets]
        elif isinstance(node, (ast.Expr, ast.Pass)):
            continue
        else:  # if, try, for, with, del, global...: names it may or may not bind
            return None
        if "__getattr__" in bound:  # PEP 562: any name may exist
            return None
        names.update(n for n in bound if not (starred and n.startswith("_")))
    return names, starred_from


def _real():
    if isinstance(sys.modules.get(NAME), _Deferred):
        sys.modules.pop(NAME, None)
    return importlib.import_module(NAME)


def is_valid_syntax(term: str, value: str) -> bool:
    return _real().is_valid_syntax(term, value)


def defer() -> None:
    """Install the stand-in where the package is installed and nothing has imported it (nor
    jsonschema, which imports it) yet; elsewhere nothing changes."""
    if NAME in sys.modules or "jsonschema" in sys.modules:
        return
    # sys.path's finder, not importlib.util.find_spec: `import litlab` stays a few milliseconds
    spec = importlib.machinery.PathFinder.find_spec(NAME)
    if spec is None or spec.submodule_search_locations is None:
        return
    if importlib.machinery.PathFinder.find_spec("lark") is None:  # jsonschema would skip it
        return
    stand_in = _Deferred(NAME, "rfc3987_syntax, imported on first use (litlab.compat.rfc3987)")
    stand_in.__path__ = list(spec.submodule_search_locations)
    stand_in.__file__, stand_in.__cached__ = spec.origin, spec.cached
    stand_in.__package__, stand_in.__spec__, stand_in.__loader__ = NAME, spec, spec.loader
    stand_in.is_valid_syntax = is_valid_syntax
    sys.modules[NAME] = stand_in


def check_rfc3987() -> None:
    """The package still has `is_valid_syntax(term, value)` and jsonschema still imports it by
    that name (read from their files: importing the package is the cost this module saves)."""
    import ast
    import importlib.metadata
    from pathlib import Path

    from litlab.compat import missing

    installed = importlib.metadata.version("rfc3987-syntax")
    helpers = Path(importlib.machinery.PathFinder.find_spec(NAME).origin).with_name(
        "syntax_helpers.py"
    )
    functions = {
        node.name: [a.arg for a in node.args.args]
        for node in ast.parse(helpers.read_text()).body
        if isinstance(node, ast.FunctionDef)
    }
    if functions.get("is_valid_syntax") != ["term", "value"]:
        raise missing("rfc3987-syntax", CHECKED_WITH, installed, "is_valid_syntax(term, value)")
    importer = Path(importlib.machinery.PathFinder.find_spec("jsonschema").origin).with_name(
        "_format.py"
    )
    if "from rfc3987_syntax import is_valid_syntax" not in importer.read_text():
        what = "jsonschema's `from rfc3987_syntax import is_valid_syntax`"
        raise missing("rfc3987-syntax", CHECKED_WITH, installed, what)
