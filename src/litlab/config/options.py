"""Config options found without importing torch: a data config's target and task, the data
configs that fit a model, and the one line of a model/data mismatch. Used by validation (before
torch) and by building (after)."""

from pathlib import Path

import hydra
from omegaconf import OmegaConf

from litlab.config.compose import CONFIG_DIR


def choice(group: str) -> str:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return str(HydraConfig.get().runtime.choices.get(group))
    return "?"


def target_of(path) -> str | None:
    """A config file's `_target_`, following its defaults list (e.g. citeseer extends cora)."""
    node = OmegaConf.load(path)
    if "_target_" in node:
        return node._target_
    parents = [d for d in node.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    return target_of(path.parent / f"{parents[0]}.yaml") if parents else None


def data_options(tasks) -> list[str]:
    """Names of the data configs whose datamodule has a task in `tasks`."""
    fits = []
    for path in sorted((CONFIG_DIR / "data").glob("*.yaml")):
        try:
            target = target_of(path)
            task = target and (static_attr(target, "task") or hydra.utils.get_class(target).task)
            if task in tasks:
                fits.append(path.stem)
        except Exception:  # a broken data config must not hide the real error
            continue
    return fits


def static_attr(dotted: str, name: str):
    """A class attribute written as a literal in the class's source (or an ancestor's in the
    same module; module-level string constants resolved), read without importing the module
    (which would import torch). None when it cannot be told that way."""
    import ast
    import importlib.util

    module, _, cls_name = dotted.rpartition(".")
    if not module.startswith("litlab."):  # finding another package's module may import torch
        return None
    try:
        spec = importlib.util.find_spec(module)
        tree = ast.parse(Path(spec.origin).read_text())
    except Exception:
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    consts, imported = {}, {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            names, values = n.targets[0], n.value
            pairs = (
                zip(names.elts, values.elts)
                if isinstance(names, ast.Tuple) and isinstance(values, ast.Tuple)
                else [(names, values)]
            )
            consts |= {
                t.id: v.value
                for t, v in pairs
                if isinstance(t, ast.Name) and isinstance(v, ast.Constant)
            }
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            imported |= {a.asname or a.name: f"{n.module}.{a.name}" for a in n.names}
    seen = set()
    while cls_name in classes and cls_name not in seen:
        seen.add(cls_name)
        node = classes[cls_name]
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in stmt.targets
            ):

                class Constants(ast.NodeTransformer):
                    def visit_Name(self, n):
                        return ast.Constant(consts[n.id]) if n.id in consts else n

                try:
                    return ast.literal_eval(Constants().visit(stmt.value))
                except ValueError:
                    return None
        bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
        cls_name = bases[0] if bases else ""
        if cls_name not in classes and cls_name in imported:  # a base from another module
            return static_attr(imported[cls_name], name)
    return None


def incompatible(tasks, task: str) -> str:
    return (
        f"model={choice('model')} ({', '.join(tasks)}) cannot train on "
        f"data={choice('data')} ({task}); data that fit this model: "
        f"{', '.join(data_options(tasks))}"
    )
