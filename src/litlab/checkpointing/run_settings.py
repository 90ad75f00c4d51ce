"""A resume takes the run's own settings: what a resumed federated run or compress step
computes comes from the run it continues, not from this command's defaults.

`python src/federate.py federate.rounds=8` stopped, then `ckpt_path=<run dir>` (the command it
prints) must go on with 8 rounds, not the default 20. So the run config stored in the resume
file is the default of every key a recipe lets it set (`roots`); a key this command sets on
its command line (Hydra's task overrides) that differs from the run is refused in one line
naming both values; where things are (`paths`, `*_dir`, `*_file`) stays this command's. The
stored config is data (`trust.check` first): a `_target_` it sets must be a kind the recipe
builds there (`targets`), any other is refused.
"""

from litlab.checkpointing import trust
from litlab.errors import UserError

GONE = object()  # a key the stored run does not have


def explicit_keys() -> list[tuple[str, ...]] | None:
    """The config paths this command's overrides set (`model=gnn` -> ('model',),
    `federate/strategy=fedprox` -> ('federate', 'strategy'), `x@a.b=c` -> ('a', 'b'));
    `()` for a global group (`experiment=...`): it may set any key. None without Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    keys = []
    for text in HydraConfig.get().overrides.task:
        key = str(text).split("=", 1)[0].lstrip("+~")
        if "@" in key:
            key = key.split("@", 1)[1]
        path = tuple(key.replace("/", ".").split("."))
        keys.append(() if path[0] == "experiment" else path)
    return keys


def _where(path: tuple) -> bool:
    """A key that says where things are (a folder, a file), not what is computed."""
    last = str(path[-1]) if path else ""
    return last.endswith(("_dir", "_file")) or last == "dirpath"


def differences(stored, current, path: tuple = ()):
    """Paths of the leaves (scalars, lists, whole subtrees one side lacks) that differ."""
    if isinstance(stored, dict) and isinstance(current, dict):
        for key in sorted(set(stored) | set(current), key=str):
            yield from differences(stored.get(key, GONE), current.get(key, GONE), (*path, key))
    elif isinstance(stored, dict) and current in (None, GONE):
        if not stored:
            yield path
        for key in sorted(stored, key=str):
            yield from differences(stored[key], GONE, (*path, key))
    elif stored != current:
        yield path


def _at(config, path: tuple):
    for key in path:
        config = config.get(key, GONE) if isinstance(config, dict) else GONE
    return config


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def _covered(path: tuple, explicit) -> bool:
    if explicit is None:  # no command line known (the Python API): all of it was given
        return True
    return any(path[: len(k)] == k or k[: len(path)] == path for k in explicit)


def _shown(value) -> str:
    return "absent" if value is GONE else trust.shown(value)


def _same_shape(path: tuple, theirs, ours, source: str) -> None:
    """A mapping of this command's config is a mapping in the run's file too (a list or a
    number there is a damaged or crafted file, not a setting)."""
    if isinstance(ours, dict) and not isinstance(theirs, dict) and theirs not in (GONE, None):
        raise trust.untrusted_refusal(
            source, f"has {dotted(path)} of type {type(theirs).__name__}, not a mapping"
        )


def _check_target(path: tuple, value, targets: dict, source: str) -> None:
    """A `_target_` taken from the file: only the kind the recipe builds at that node."""
    if not path or path[-1] != "_target_" or path[0] in ("data", "model"):
        return  # data and model targets: trust.check has checked them where they sit
    kinds = targets.get(dotted(path[:-1]))
    why = "is not built from a resumed run's file" if kinds is None else None
    if why is None:
        why = trust.target_refusal(value, kinds, ())
    if why is not None:
        raise trust.untrusted_refusal(
            source, f"names {dotted(path)}={trust.shown(value)}, which {why}"
        )


def _no_nested_target(path: tuple, value, source: str) -> None:
    """A list or subtree taken whole from the file holds no `_target_` outside data and model
    (trust.check has checked those): nothing else it names is built."""
    if path[0] in ("data", "model") or not isinstance(value, list | dict):
        return
    stack = [value]  # bounded: trust.check refused deep or large trees
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and "_target_" in node:
            raise trust.untrusted_refusal(
                source,
                f"names a _target_ in {dotted(path)}, which is not built from a resumed run's file",
            )
        stack.extend(
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        )


def _set(cfg, path: tuple, value) -> None:
    from omegaconf import DictConfig, open_dict

    node = cfg
    with open_dict(cfg):
        for key in path[:-1]:
            if not isinstance(node.get(key), DictConfig):
                node[key] = {}
            node = node[key]
        if value is GONE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value


def adopt(cfg, stored: dict, source: str, roots, targets: dict, free=(), started="") -> list:
    """Set in `cfg` every value of `stored` under `roots` that differs and this command does
    not set; refuse one it sets differently, and any difference outside `roots` and `free`
    (paths: key tuples). `stored` passed `trust.check` (plain data). Returns the adopted
    keys, dotted."""
    from omegaconf import OmegaConf

    current = {}  # the free keys are not resolved (compress's callbacks need the run view)
    for key in cfg:
        if (key,) not in free:
            value = cfg[key]
            is_node = OmegaConf.is_config(value)
            current[key] = OmegaConf.to_container(value, resolve=True) if is_node else value
    explicit = explicit_keys()
    found = [
        p for p in differences(stored, current) if p and not any(p[: len(f)] == f for f in free)
    ]
    adopted = []
    for path in found:
        theirs, ours = _at(stored, path), _at(current, path)
        if _where(path) and (path[0] != "data" or _covered(path, explicit)):
            continue  # where things are: this command's (data folders: see data_folders)
        if path[0] in roots and not _covered(path, explicit):
            _same_shape(path, theirs, ours, source)
            adopted.append(path)
            continue
        hint = (
            f"drop {dotted(path)}=... to continue with the run's own"
            if path[0] in roots
            else "resume with the run's own settings"
        )
        raise UserError(
            f"ckpt_path: {dotted(path)} is {_shown(theirs)} in the run to resume, "
            f"{_shown(ours)} here; {hint}{started}"
        )
    for path in adopted:
        _check_target(path, _at(stored, path), targets, source)
        _no_nested_target(path, _at(stored, path), source)
    for path in adopted:
        _set(cfg, path, _at(stored, path))
    return [dotted(p) for p in adopted]
