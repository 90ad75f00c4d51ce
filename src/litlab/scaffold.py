"""`make new-task NAME=mytask FROM=vision`: copy one domain into a new task (docs/new_task.md).

Every domain folder can be copied: what it copies is the folder's own declaration
(`litlab.domains.Template`): its datamodule (`data.py`) and net (`nets.py`) under new names in
`src/litlab/domains/mytask/`, then their `data`/`model`/`experiment` configs and a test. The
model config names the source domain's LightningModule as it is (the task kind's loss, metrics
and steps). Nothing outside the copy changes, and `python src/train.py experiment=NAME` trains
at once."""

import ast
import keyword
import re
import sys
from pathlib import Path

from litlab.domains import Template, declarations

ROOT = Path(__file__).resolve().parents[2]


class ScaffoldError(Exception):
    """A name that cannot become a task: shown as one line, exit 2."""


def _source(module: str) -> str:
    return (ROOT / "src" / (module.replace(".", "/") + ".py")).read_text()


def _top_level_names(tree: ast.Module) -> dict[str, ast.stmt]:
    """Each name the module binds at top level -> the statement that binds it."""
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:  # `A = ...` and `A, B = ...`
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update({e.id: node for e in elts if isinstance(e, ast.Name)})
    return names


def copy_class(module: str, name: str, new_name: str) -> str:
    """The class's (or function's) source under `new_name`, with the imports it needs: the
    original module's import lines for library names, and `from <module> import ...` for the
    module's own helpers."""
    source = _source(module)
    tree = ast.parse(source)
    kinds = (ast.ClassDef, ast.FunctionDef)
    cls = next(n for n in tree.body if isinstance(n, kinds) and n.name == name)
    start = (cls.decorator_list[0] if cls.decorator_list else cls).lineno - 1
    body = re.sub(rf"\b{name}\b", new_name, "\n".join(source.splitlines()[start : cls.end_lineno]))
    used = {n.id for n in ast.walk(cls) if isinstance(n, ast.Name)}
    bound = _top_level_names(tree)
    is_import = lambda n: isinstance(n, (ast.Import, ast.ImportFrom))  # noqa: E731
    needed = {bound[i] for i in used & set(bound) if is_import(bound[i])}
    imports = [ast.get_source_segment(source, n) for n in sorted(needed, key=lambda n: n.lineno)]
    own = sorted(i for i in used & set(bound) if i != name and not is_import(bound[i]))
    if own:
        imports.append(f"from {module} import {', '.join(own)}")
    return "\n".join(imports) + "\n\n\n" + body + "\n"


def targets(name: str, root: Path) -> list[Path]:
    """The files a copy named `name` writes: its domain folder (the datamodule, the net), three
    configs, a test. The LightningModule is the source domain's, used as it is: the kind's loss,
    metrics and steps are not a new task's to write (docs/new_task.md, the six ideas)."""
    domain = root / "src" / "litlab" / "domains" / name
    return [
        domain / "data.py",
        domain / "nets.py",
        *(root / "configs" / group / f"{name}.yaml" for group in ("data", "model", "experiment")),
        root / "tests" / f"test_{name}.py",
    ]


def check_name(name: str, root: Path) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ScaffoldError(
            f"NAME={name!r} is not a valid task name: use a lower-case Python "
            "identifier (letters, digits, underscores; e.g. NAME=lesions)"
        )
    taken = [p for p in targets(name, root) if p.exists()]
    if taken:
        raise ScaffoldError(
            f"NAME={name} exists already ({taken[0].relative_to(root)}): "
            "choose another name or delete the old copy first"
        )


def _split(package: str, path: str) -> tuple[str, str]:
    """("litlab.domains.vision.nets", "SmallCNN") of "nets.SmallCNN"."""
    module, _, symbol = f"{package}.{path}".rpartition(".")
    return module, symbol


def _net_copy(net: tuple[str, str], symbol: str) -> str:
    """A net of a nets module: the whole module (its helpers with it), the net renamed; a net
    beside other code (a domain's module.py): the net alone, its helpers imported."""
    if ".nets." in f"{net[0]}.":
        return re.sub(rf"\b{net[1]}\b", symbol, _source(net[0]))
    return copy_class(*net, symbol)


def copy_plan(name: str, source: str, root: Path = ROOT) -> dict[Path, str]:
    """Every file the copy writes, with its text (nothing is written until all are made)."""
    domains = declarations()
    if source not in domains:
        raise ScaffoldError(f"FROM={source!r} is not a domain; valid: {', '.join(domains)}")
    check_name(name, root)
    t, package = domains[source].template, f"litlab.domains.{source}"
    C = "".join(part.capitalize() for part in name.split("_"))  # CamelCase
    data, net = _split(package, t.data), _split(package, t.net)
    net_symbol = f"{C}Net" if net[1][0].isupper() else f"{name}_net"
    header = f'"""{C}: copied from litlab\'s {source} domain by `make new-task` (edit freely)."""\n'
    data_py, net_py, data_yaml, model_yaml, experiment_yaml, test_py = targets(name, root)
    mine = Template(
        f"data.{C}DataModule", f"nets.{net_symbol}", name, name, t.metric, t.bar, t.epochs
    )
    files = {
        data_py: header + copy_class(*data, f"{C}DataModule"),
        net_py: _net_copy(net, net_symbol),
        data_py.parent / "__init__.py": header + DECLARATION.format(t=mine),
    }
    renamed = {
        ".".join(data): f"litlab.domains.{name}.data.{C}DataModule",
        ".".join(net): f"litlab.domains.{name}.nets.{net_symbol}",
    }
    configs = (("data", t.data_config, data_yaml), ("model", t.model_config, model_yaml))
    for group, old, path in configs:
        text = (ROOT / "configs" / group / f"{old}.yaml").read_text()
        for a, b in renamed.items():
            text = text.replace(f"_target_: {a}\n", f"_target_: {b}\n")
        # a model config that picks its own default data picks the copied data config
        text = re.sub(rf"(override /data@_global_\.data: ){t.data_config}\b", rf"\g<1>{name}", text)
        origin = f"# {name}: copied from {group}/{old}.yaml by `make new-task` (edit freely)\n"
        files[path] = origin + text
    files[experiment_yaml] = (
        f"# @package _global_\n# {name}: `python src/train.py experiment={name}` "
        f"(copied from the {source} domain by `make new-task`)\ndefaults:\n"
        f"  - override /data: {name}\n  - override /model: {name}\n\ntask_name: {name}\ntags: [{name}]\n"
    )
    files[test_py] = TEST.format(t=t, name=name, source=source)
    return files


#: the copy's declaration: its datamodule and net (the module is its source domain's)
DECLARATION = """
from litlab.domains import Domain, Template

DOMAIN = Domain(
    datamodules=("{t.data}",),
    modules=(),
    nets=("{t.net}",),
    template=Template(
        data="{t.data}",
        net="{t.net}",
        data_config="{t.data_config}",
        model_config="{t.model_config}",
        metric="{t.metric}",
        bar={t.bar},
        epochs={t.epochs},
    ),
)
"""


TEST = '''"""{name}: the copied task trains and beats its bar (copied from the {source} domain)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_{name}_trains(tmp_path):
    cmd = [sys.executable, str(ROOT / "src" / "train.py"), "experiment={name}",
           "trainer.max_epochs={t.epochs}", f"paths.log_dir={{tmp_path}}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads(next(tmp_path.glob("{name}/runs/*/metrics.json")).read_text())
    assert metrics["{t.metric}"] > {t.bar}, metrics
'''


def create(name: str, source: str, root: Path = ROOT) -> list[Path]:
    files = copy_plan(name, source, root)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def run_scaffold(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not all(argv):
        domains = "|".join(declarations())
        print(f"error: usage: make new-task NAME=mytask FROM={domains}", file=sys.stderr)
        return 2
    try:
        written = create(*argv)
    except ScaffoldError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    print(f"train it: python src/train.py experiment={argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(run_scaffold())
