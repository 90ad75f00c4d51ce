"""What a checkpoint's stored config may make litlab build: it is data, not code.

`weights_only=True` keeps pickled code out of a checkpoint, but eval.py, export.py, compress.py,
serve.py and `load_run` then build the run from the config stored inside it, and Hydra's
`instantiate` would resolve interpolations and resolvers and call any `_target_`. So a stored
config (`checked`) is plain data of bounded depth and size, holds no `${` anywhere, no
top-level `hydra` node and no Hydra-special key outside a node with a target, and each
`_target_` (and a pruned net's `base_target`) of the groups built from it (`BUILT`) names a
*kind* of thing the recipes build: imported from a package litlab builds from, then checked
with `issubclass` against the kinds allowed where it sits (`data`: a LightningDataModule,
`model`: a LightningModule, inside them: nets, optimizers, schedulers, transforms), or one of
a short list of net factories (`NET_FUNCTIONS`: none writes, deletes, trains or spawns). Other
groups (trainer, callbacks, logger...) are never built from a file: their targets stay text.
The dict that passed is the one built. Anything else is refused in one line naming the key
and the target, unless the user trusts the file (`trust_checkpoint=true`, `trust=True`).

The data folders of a stored config are this machine's, never the file's (`here`): taken
from a crafted file, a `data.*_dir` would be created and filled wherever it says. So each moves
from the data dir of the run that wrote the checkpoint to this command's, except a folder this
machine's user typed on that run's command line, read from the run dir's own record only when
the run dir is really this user's and ran in this very folder (`user_chosen`).

Lightning restores `ModelCheckpoint`'s state on a resume and later deletes the previous best
and last files it names, so a crafted state is a way to delete files: refused
(`check_callback_states`) before train.py or compress.py resumes from the file."""

import inspect
import os
import re
import stat
import sys
from pathlib import Path, PurePath

from litlab.errors import UserError, one_line

# a stored target may import a module only from these packages (importing runs its top level)
IMPORT_ROOTS = (
    "litlab",
    "torch",
    "lightning",
    "torchmetrics",
    "torchvision",
    "torch_geometric",
    "optuna",
    "flwr",
    "aim",
)
# (module, class): what the recipes build from a run's data and model configs
PARTS = (
    ("torch.nn", "Module"),  # nets (and LightningModules: a distillation student)
    ("torch.optim", "Optimizer"),
    ("torch.optim.lr_scheduler", "LRScheduler"),  # ReduceLROnPlateau too
    ("torchvision.transforms.v2", "Transform"),
    ("torchvision.transforms", "Compose"),  # v1 transforms are nn.Modules
)
# the top-level nodes load_run builds, and the one kind each must be
ROOTS = {
    "data": (("lightning.pytorch", "LightningDataModule"),),
    "model": (("lightning.pytorch", "LightningModule"),),
}
# the groups built from a checkpoint (compress: a resumed step's student); the others
# (trainer, callbacks, logger, ...) come from the command line of the run that loads it: their
# stored targets are kept as text, never imported nor built
BUILT = ("data", "model", "compress")
# functions a stored config may call: the net factories defined in a domain's nets module
# (litlab.domains.<domain>.nets: pure nn.Module builders that import no litlab module above them,
# `make new-task`'s too, and a nets/ package's modules, as copies made before nets.py had them)
# and, by exact name, the one that rebuilds a pruned net
NETS_PACKAGE = re.compile(r"litlab\.domains\.[a-z][a-z0-9_]*\.nets(\.[a-z][a-z0-9_]*)?")
NET_FUNCTIONS = (
    "litlab.domains.vision.nets.resnet18",
    "litlab.domains.medical3d.nets.resnet3d",
    "litlab.domains.medical3d.nets.unet3d",
    "litlab.compression.prune.resized_net",  # a pruned net: base_target is checked as a net
)
HYDRA_KEYS = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")
MAX_DEPTH, MAX_NODES = 32, 200_000
# dotted public names only: no `_private` or `__main__` module is imported, no dunder reached
PUBLIC_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+")
# modules whose classes may be built from a run's data and model configs (torchmetrics' and
# MONAI's are left out: some download weights when constructed)
PART_MODULES = (
    "litlab.",
    "torch.nn.",
    "torch.optim.",
    "torch_geometric.nn.",
    "torchvision.models.",
    "torchvision.transforms.",
)
TRUST_HINT = (
    "if you trust the file, pass trust_checkpoint=true (eval.py, export.py, compress.py; "
    "serve.py: export with it first) or load_run(..., trust=True)"
)


def shown(value, limit: int = 80) -> str:
    """A key or value as it may appear in a one-line message (escaped, cut)."""
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ExportedFile(str):
    """The path of an exported model file whose metadata holds a run's stored config
    (`eval.py model_path=`): messages name it by its own key, not as a checkpoint."""

    key = "model_path"


def named(source) -> str:
    """`ckpt_path=FILE`, or `model_path=FILE` for an `ExportedFile`: the key and file a message
    about a stored config names."""
    return f"{getattr(source, 'key', 'ckpt_path')}={shown(source, 200)}"


def untrusted_refusal(source: str, what: str) -> UserError:
    return UserError(f"{named(source)}: its stored config {what}; {TRUST_HINT}")


def _object(name: str):
    """What Hydra's `instantiate` would locate for `name` (its own lookup, so the object checked
    is the one built), imported only from IMPORT_ROOTS; None if it cannot be located (then
    Hydra cannot build it either: one line when it is built)."""
    import hydra

    if not PUBLIC_NAME.fullmatch(name) or name.split(".")[0] not in IMPORT_ROOTS:
        raise LookupError
    try:
        return hydra.utils.get_object(name)
    except Exception:  # noqa: BLE001
        return None


def _is_kind(obj, kinds) -> bool:
    """issubclass(obj, one of kinds), importing no module: a base class is already imported
    when `obj` subclasses it."""
    for module, cls in kinds:
        base = getattr(sys.modules.get(module), cls, None)
        if inspect.isclass(base) and issubclass(obj, base):
            return True
    return False


def target_refusal(name, kinds, functions=NET_FUNCTIONS) -> str | None:
    """Why `name` may not be built where `kinds` are allowed, or None when it may."""
    if not isinstance(name, str):
        return "is not a name"
    if name in functions:
        return None
    if name in NET_FUNCTIONS:
        return "is a function litlab does not call there"
    try:
        obj = _object(name)
    except LookupError:
        return f"is outside the packages litlab builds from ({', '.join(IMPORT_ROOTS)})"
    if obj is None:
        return None  # not importable: Hydra cannot build it either (one line when built)
    if functions and inspect.isfunction(obj) and NETS_PACKAGE.fullmatch(obj.__module__):
        return None  # a net factory of litlab's nets (pure nn.Module builders; new domains')
    if not inspect.isclass(obj):
        return "is not a class (only net factories are functions litlab calls)"
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] not in IMPORT_ROOTS:
        return f"is a class of {module}, outside the packages litlab builds from"
    if kinds is PARTS and not module.startswith(PART_MODULES):
        return f"is a class of {module}, which litlab does not build from a checkpoint"
    if not _is_kind(obj, kinds):
        allowed = ", ".join(dict.fromkeys(cls for _, cls in kinds))
        return f"is not a kind litlab builds there (allowed: subclasses of {allowed})"
    return None


def config_nodes(config: dict):
    """(key path, node, depth) of every dict and list in the tree, depth-first, iteratively
    (a crafted deep nesting yields `TooBig` and ends, not a RecursionError)."""
    stack = [("", config, 0)]
    seen = 0
    while stack:
        path, node, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH or seen > MAX_NODES:
            yield path, TooBig(), None
            return
        yield path, node, depth
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, dict | list):
                sub = f"{path}.{key}" if isinstance(node, dict) else f"{path}[{key}]"
                stack.append((sub.lstrip("."), value, depth + 1))


class TooBig:
    """Marks a tree deeper or larger than any config litlab writes."""


SCALARS = (str, int, float, bool, type(None))


def _kinds_at(path: str):
    """(kinds, functions) allowed at `path`; None where nothing is built from the file."""
    if path in ROOTS:
        return ROOTS[path], ()
    return (PARTS, NET_FUNCTIONS) if path.split(".")[0].split("[")[0] in BUILT else None


def check_is_data(config, source: str) -> None:
    """Refuse, in one line, a stored config that is not plain data or names what litlab does
    not build from a checkpoint (see the module docstring)."""
    if not isinstance(config, dict):
        raise untrusted_refusal(source, f"is a {type(config).__name__}, not a mapping")
    if "hydra" in config:
        raise untrusted_refusal(
            source, "has a 'hydra' node (Hydra's own settings are never stored)"
        )
    for path, node, _ in config_nodes(config):
        if isinstance(node, TooBig):
            raise untrusted_refusal(
                source, f"is nested deeper than {MAX_DEPTH} or over {MAX_NODES} nodes"
            )
        if isinstance(node, dict):
            _check_mapping(path, node, source)
        else:
            for i, value in enumerate(node):
                _check_value(f"{path}[{i}]", value, source)


def _check_mapping(path: str, node: dict, source: str) -> None:
    where = f"{path}." if path else ""
    for key, value in node.items():
        if not isinstance(key, str | int) or isinstance(key, bool) or "${" in str(key):
            raise untrusted_refusal(source, f"has the key {shown(key)} under {path or 'its top'}")
        _check_value(f"{where}{key}", value, source)
        if path.startswith("data") and str(key).endswith("_file"):
            _check_file(f"{where}{key}", value, source)
    special = [k for k in HYDRA_KEYS if k in node]
    if special and "_target_" not in node:
        raise untrusted_refusal(source, f"has {where}{special[0]} without a _target_")
    allowed = _kinds_at(path) if "_target_" in node else None
    if allowed is None:
        return
    kinds, functions = allowed
    key, target = f"{where}_target_", node["_target_"]
    why = target_refusal(target, kinds, functions)
    if why is None and target == "litlab.compression.prune.resized_net":
        functions = tuple(f for f in NET_FUNCTIONS if f != target)
        key, target = f"{where}base_target", node.get("base_target")
        why = target_refusal(target, PARTS, functions)
    if why is not None:
        raise untrusted_refusal(source, f"names {key}={shown(target)}, which {why}")


def _check_value(key: str, value, source: str) -> None:
    if isinstance(value, dict | list):
        return
    if not isinstance(value, SCALARS):
        raise untrusted_refusal(
            source, f"has {key} of type {type(value).__name__} (plain values only)"
        )
    if isinstance(value, str) and "${" in value:
        raise untrusted_refusal(
            source,
            f"has an interpolation or resolver in {key}={shown(value)} (a stored config is "
            "data: litlab resolves nothing in it)",
        )


def _check_file(key: str, value, source: str) -> None:
    """A data file a checkpoint names (a split file) is read if it is there, never created: a
    file the checkpoint chose is not written anywhere."""
    if value is not None and not (isinstance(value, str) and Path(value).is_file()):
        raise UserError(
            f"{named(source)}: its stored config names {key}={shown(value)}, "
            f"which is not a file here, and litlab writes no file a checkpoint names; pass "
            f"+data_overrides.{key.split('.', 1)[1]}=null (or a file of yours)"
        )


def merged(config: dict, overrides: dict | None) -> dict:
    """`config` with `overrides` merged into its `data` node (a new dict; nested keys merge)."""

    def merge(base, new):
        if not isinstance(base, dict) or not isinstance(new, dict):
            return new
        return {**base, **{k: merge(base.get(k), v) for k, v in new.items()}}

    if not overrides or not isinstance(config, dict):
        return config
    return {**config, "data": merge(config.get("data") or {}, overrides)}


def checked(stored, source: str, overrides: dict | None = None, trust: bool = False):
    """The DictConfig to build the run from: the stored config (its data folders already
    this machine's: `data_folders.here`) with this command's data `overrides`, checked
    unless `trust`. Built from exactly the dict that was checked."""
    from omegaconf import OmegaConf

    config = merged(stored, overrides)
    if not trust:
        check_is_data(config, source)
    try:
        return OmegaConf.create(config)
    except Exception as err:  # noqa: BLE001  (a trusted file with values OmegaConf refuses)
        raise untrusted_refusal(source, f"cannot be read as a config: {one_line(err)}") from None


# ---------------------------------------------------------- data folders
RECORDS = (".hydra/overrides.yaml", ".hydra/resume-*/overrides.yaml")
MAX_RECORDS = 64  # resumes of one run dir read at most


def here(config: dict, data_dir, source: str, overridden=(), chosen=None) -> dict:
    """`config` with each `data.*_dir` moved from its run's data dir to `data_dir`
    (`/their/data/medmnist` -> `<data_dir>/medmnist`); a folder outside its run's data dir is
    refused, unless this command names it (`overridden`: its data_overrides) or the user
    chose it for the run that wrote the file (`chosen`: `{"data.data_dir": "/elsewhere"}`,
    kept as is)."""
    data, paths, chosen = config.get("data"), config.get("paths"), chosen or {}
    if not isinstance(data, dict):
        return config
    theirs = paths.get("data_dir") if isinstance(paths, dict) else None
    moved = dict(data)
    for key, value in data.items():
        if not (isinstance(key, str) and key.endswith("_dir")) or value is None:
            continue
        if key in overridden or _is_chosen(chosen.get(f"data.{key}"), value):
            continue  # this command names the folder, or the user did for the run
        inside = isinstance(theirs, str) and isinstance(value, str)
        inside = inside and PurePath(value).is_relative_to(theirs)
        rel = PurePath(value).relative_to(theirs) if inside else None
        if not inside or ".." in rel.parts:
            raise untrusted_refusal(
                source,
                f"names data.{key}={shown(value)}, outside the data dir of its run "
                f"({shown(theirs)}); litlab writes data only where this command says: pass "
                f"+data_overrides.{key}=FOLDER",
            )
        if _is_chosen(chosen.get("paths.data_dir"), theirs):
            continue  # inside the data dir the user chose for the run
        moved[key] = str(PurePath(data_dir) / rel)
    # the run as rebuilt here: a checkpoint derived from it (a compress step) says so
    paths = {**(paths if isinstance(paths, dict) else {}), "data_dir": str(data_dir)}
    return {**config, "data": moved, "paths": paths}


def _is_chosen(recorded, value) -> bool:
    """The stored folder is the one the user typed, and it is an existing folder here."""
    if not isinstance(recorded, str) or not isinstance(value, str):
        return False
    same = recorded == value or os.path.abspath(recorded) == os.path.abspath(value)
    return same and os.path.isdir(value)


def user_chosen(*ckpt_paths) -> dict:
    """{"data.data_dir": "/elsewhere", ...}: the data folders the user typed on the command
    lines of the runs that wrote these checkpoint files (a compress step's file: also its
    source checkpoint's run), read from each run dir's own record; {} for a file that is not
    inside a run dir of this user."""
    found = {}
    for path in ckpt_paths:
        run = _own_run_dir(path) if isinstance(path, str | Path) else None
        if run is None:
            continue
        records = [run / RECORDS[0], *sorted(run.glob(RECORDS[1]))][:MAX_RECORDS]
        for record in records:
            cwd = _started_in(record, run) if _owned(record) else None
            if cwd is not None and not record.is_symlink():
                found |= _folders(record, cwd)
    return found


def _started_in(record: Path, run: Path) -> str | None:
    """The folder the run that wrote the record was started from (Hydra's `runtime.cwd`;
    "" if unknown), when that run ran in this very folder (its `runtime.output_dir`): a run
    dir unpacked or copied from elsewhere names another (None)."""
    from omegaconf import OmegaConf

    try:
        hydra = OmegaConf.load(record.parent / "hydra.yaml")
        recorded = OmegaConf.select(hydra, "hydra.runtime.output_dir")
        if not (isinstance(recorded, str) and Path(recorded).resolve() == run):
            return None
        cwd = OmegaConf.select(hydra, "hydra.runtime.cwd")
        return cwd if isinstance(cwd, str) else ""
    except Exception:  # noqa: BLE001  (no such record, or not Hydra's: nothing chosen)
        return None


def _own_run_dir(ckpt_path) -> Path | None:
    """The run dir holding `ckpt_path` (`<run>/checkpoints/x.ckpt`, `<run>/x.ckpt`) when the
    file is really there (no link out) and the run dir is this user's."""
    try:
        real = Path(ckpt_path).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    for run in (real.parent, real.parent.parent):
        if (run / ".hydra").is_dir() and not (run / ".hydra").is_symlink():
            owned = all(_owned(p) for p in (real, run, run / ".hydra"))
            return run if owned else None
    return None


def _owned(path: Path) -> bool:
    """Owned by this user (not writable by others); where there are no uids (Windows): True."""
    if not hasattr(os, "getuid"):
        return True
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & stat.S_IWOTH


def _folders(record: Path, cwd: str = "") -> dict:
    """The `data.*_dir` and `paths.data_dir` values of one overrides.yaml (Hydra's grammar);
    a relative one from `cwd`, the folder its run started in (the run stored it so:
    `litlab.config.data_paths`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    try:
        lines = OmegaConf.to_container(OmegaConf.load(record))
    except Exception:  # noqa: BLE001  (not a record Hydra wrote: nothing chosen)
        return {}
    parser, found = OverridesParser.create(), {}
    for line in lines if isinstance(lines, list) else ():
        try:
            override = parser.parse_overrides([str(line)])[0]
        except Exception:  # noqa: BLE001, S112  (a line Hydra did not write: not a choice)
            continue
        key, value = override.key_or_group, override.value()
        wanted = key == "paths.data_dir" or (key.startswith("data.") and key.endswith("_dir"))
        if wanted and not override.is_delete() and isinstance(value, str):
            relative = cwd and value and not os.path.isabs(value) and "${" not in value
            found[key] = os.path.normpath(os.path.join(cwd, value)) if relative else value
    return found


# ------------------------------------------------------- callback states
# the file paths of ModelCheckpoint's state (and the keys of its `best_k_models`)
STATE_PATHS = ("best_model_path", "kth_best_model_path", "last_model_path")


def check_callback_states(ckpt: dict, source: str) -> None:
    """Refuse callback states naming files outside their own checkpoint folder: a resumed
    ModelCheckpoint removes its previous best and last files, so a crafted `best_k_models`
    entry (`<dirpath>/../../victim`, an s3:// URL) would delete that file."""
    states = ckpt.get("callbacks") if isinstance(ckpt, dict) else None
    for name, state in (states or {}).items() if isinstance(states, dict) else ():
        if not isinstance(state, dict) or not isinstance(state.get("dirpath"), str | None):
            continue
        folder = str(state.get("dirpath") or "").rstrip("/")
        best = state.get("best_k_models")
        paths = [state.get(k) for k in STATE_PATHS] + list(best if isinstance(best, dict) else ())
        for path in paths:
            if path in (None, ""):
                continue
            text = str(path)
            climbs = ".." in text.replace("\\", "/").split("/")
            inside = bool(folder) and text.startswith(folder + "/")
            if not isinstance(path, str) or climbs or not inside:
                raise UserError(
                    f"ckpt_path={shown(source, 200)}: its callback state "
                    f"{shown(name.split('{')[0])} names the file {shown(text, 300)} outside "
                    f"its checkpoint folder {shown(folder, 200)}; a resume would delete it: "
                    f"refused (use a checkpoint litlab wrote)"
                )
