"""Hydra internals litlab uses (checked against hydra-core 1.3.8).

- `hydra.core.utils._save_config`: writes .hydra/config.yaml as a Hydra run does (the Python
  API makes its run dir as Hydra would: runs/run_dir);
- `JobReturn._return_value`: a job's return value or exception without re-raising it (the
  sweep summary and the Optuna sweeper record failed jobs and go on);
- `BasicSweeper.split_arguments`: the jobs of a grid sweep, in Hydra's basic sweeper's order
  (litlab's grid sweeper runs them so: sweeps/grid; every job is checked before the first
  starts: runs/sweep_dir, which knows the basic sweeper by its `_target_`, `BASIC_SWEEPER`).
- `hydra._internal.config_repository.ConfigRepository`: rebuilt over a code snapshot's
  configs (utils/code_state).
- `hydra._internal.hydra.Hydra.get_mode`, with the `repository.sources` of its config loader:
  skipped where no config can set `hydra.mode` (`skip_mode_compose`).
"""

import re

CHECKED_WITH = "1.3.8"
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # hydra/sweeper=basic


def _fail(what: str):
    import hydra

    from litlab.compat import missing

    return missing("hydra-core", CHECKED_WITH, hydra.__version__, what)


def save_config(cfg, filename: str, directory) -> None:
    from hydra.core.utils import _save_config

    _save_config(cfg, filename, directory)


def job_outcome(job_return):
    """What the job returned, or the exception it raised (JobReturn.return_value re-raises)."""
    return job_return._return_value


def grid_jobs(overrides) -> list[list[str]]:
    """Each job's overrides, in Hydra's order, from parsed overrides (`OverridesParser`)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def config_repository(search_path):
    """Hydra's config repository over `search_path` (a loader's `repository` is rebuilt with it
    when the search path changes: utils/code_state)."""
    from hydra._internal.config_repository import ConfigRepository

    return ConfigRepository(config_search_path=search_path)


MODE_KEY = re.compile(r"\bmode\s*:|hydra\.mode|@hydra\b|searchpath")  # worth a closer look
#: a search path of more folders than this is not scanned (`--config-dir ~`): Hydra's own
#: get_mode runs, as it would read only the files it needs
SCAN_FOLDERS = 200
PACKAGE = re.compile(r"^#\s*@package\s+(\S+)", re.MULTILINE)
HYDRA_OWN_CONFIGS = "hydra.conf"  # pkg://hydra.conf: Hydra's own groups, none sets the mode


def skip_mode_compose() -> None:
    """Before every run Hydra composes the whole config once more (`Hydra.get_mode`) only to
    read `hydra.mode`: about 40% of a refused command's CPU time. No litlab config sets the
    mode, so Hydra's own `get_mode` runs only where an override or a config file in the search
    path may set it; elsewhere the mode is None, as that compose would find (Hydra's default:
    `-m` sweeps, no flag runs once)."""
    from hydra._internal.hydra import Hydra

    if getattr(Hydra.get_mode, "litlab_skips", False):
        return
    composing = Hydra.get_mode

    def get_mode(self, config_name, overrides):
        try:
            may = _mode_may_be_set(self, overrides)
        except AttributeError:  # another Hydra's loader: let it compose
            may = True
        return composing(self, config_name, overrides) if may else None

    get_mode.litlab_skips = True
    Hydra.get_mode = get_mode


def _mode_may_be_set(hydra, overrides) -> bool:
    """True unless neither an override, a config file of a `file://` search path, nor a stored
    structured config can set `hydra.mode` (a search path of another kind: True)."""
    from pathlib import Path

    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "hydra" or key.startswith(("hydra.mode", "hydra.searchpath")):
            return True
    for source in hydra.config_loader.repository.sources:
        kind = type(source).__name__
        if kind == "StructuredConfigSource":
            continue  # the stored nodes are checked below
        if kind == "ImportlibResourcesConfigSource" and source.path == HYDRA_OWN_CONFIGS:
            continue
        if kind != "FileConfigSource":
            return True
        root = Path(source.path)
        files = _config_files(root)
        if files is None or any(_file_may_set_mode(path, root) for path in files):
            return True
    return _stored_mode_set()


def _config_files(root) -> list | None:
    """The YAML files below `root` (links to folders not followed), or None past SCAN_FOLDERS
    folders."""
    import os
    from pathlib import Path

    files = []
    for count, (folder, _, names) in enumerate(os.walk(root), start=1):
        if count > SCAN_FOLDERS:
            return None
        files += [Path(folder, n) for n in names if n.endswith(".yaml")]
    return files


_FILES_SEEN: dict[tuple, bool] = {}  # (path, mtime_ns, size) -> may set the mode


def _file_may_set_mode(path, root) -> bool:
    """Whether this YAML file can set `hydra.mode`: a `mode` key in the hydra package (a file
    of the `hydra` group, or `# @package hydra`), or under a `hydra` key anywhere (a global
    file's `hydra: {mode: ...}`); a file mentioning `hydra.mode` or placing a config `@hydra`,
    one that does not parse, or one that cannot be read (a folder named *.yaml), may."""
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _FILES_SEEN:
            _FILES_SEEN[key] = _text_may_set_mode(
                path.read_text(encoding="utf-8", errors="replace"),
                path.parent.relative_to(root).as_posix(),
            )
    except OSError:
        return True
    return _FILES_SEEN[key]


def _text_may_set_mode(text: str, group: str) -> bool:
    import yaml

    if not MODE_KEY.search(text):
        return False
    if "hydra.mode" in text or "@hydra" in text or "searchpath" in text:  # a path added later
        return True
    try:
        content = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return True
    header = PACKAGE.search(text)
    package = header.group(1) if header else "_group_"
    in_hydra = package == "hydra" or (package == "_group_" and group == "hydra")
    return (in_hydra and isinstance(content, dict) and "mode" in content) or _hydra_mode_in(content)


def _hydra_mode_in(content) -> bool:
    """A `hydra` mapping with a `mode` key anywhere in parsed YAML. Each node is visited once:
    YAML's aliases share nodes, and a few lines of them make a tree of billions of paths."""
    stack, seen = [content], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or not isinstance(node, (dict, list)):
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            hydra = node.get("hydra")
            if isinstance(hydra, dict) and "mode" in hydra:
                return True
            stack.extend(node.values())
        else:
            stack.extend(node)
    return False


def _stored_mode_set() -> bool:
    """Whether a node of Hydra's ConfigStore (Hydra's schema, the sweepers' settings) sets
    `hydra.mode`."""
    from hydra.core.config_store import ConfigNode, ConfigStore
    from omegaconf import OmegaConf

    def walk(tree: dict):
        for value in tree.values():
            if isinstance(value, ConfigNode):
                yield value
            elif isinstance(value, dict):
                yield from walk(value)

    for node in walk(ConfigStore.instance().repo):
        config = node.node
        if not (node.package or "").endswith("hydra"):
            config = config.get("hydra") if OmegaConf.is_dict(config) else None
        if OmegaConf.is_dict(config) and config.get("mode") is not None:
            return True
    return False


def check_hydra() -> None:
    from hydra.core import utils
    from hydra.core.utils import JobReturn

    if not callable(getattr(utils, "_save_config", None)):
        raise _fail("hydra.core.utils._save_config")
    if "_return_value" not in getattr(JobReturn, "__dataclass_fields__", {}):
        raise _fail("JobReturn._return_value")
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    if f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}" != BASIC_SWEEPER:
        raise _fail(BASIC_SWEEPER)
    if not callable(getattr(BasicSweeper, "split_arguments", None)):
        raise _fail("BasicSweeper.split_arguments")
    try:
        from hydra._internal.config_repository import ConfigRepository  # noqa: F401
        from hydra._internal.hydra import Hydra
    except ImportError as err:
        raise _fail(f"hydra's {err.name}") from err
    if not callable(getattr(Hydra, "get_mode", None)):
        raise _fail("Hydra.get_mode")
