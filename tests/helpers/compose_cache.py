"""Build each distinct defaults tree once per worker (issue #49). Composing a config with Hydra
is two steps: the defaults tree (which file of each group, in which package) and the merge of
those files, then the command's `key=value` overrides applied to the result. The first two
depend on the config name, the group choices (`model=gnn`, `+experiment=x`, `~logger`) and the
files on the search path, never on a value override, and they were ~85% of the 165 ms CPU of a
composition; the checks that compose in the process (refusals, validations, `--cfg job`) do so
some 500 times per `make test`, mostly with the default groups and one value changed.

`cached_defaults_list` and `cached_compose` stand in for Hydra's two functions while a test
module runs (conftest.py's autouse fixture): the key is the config name, the group overrides,
Hydra's two flags, and the search path as it stands (each file source's files with their
sizes and modification times, and the names in Hydra's ConfigStore), so a test's own config
dir, an edited file or a new one is composed afresh; a tree with a default written as an
interpolation (which can read more than the group choices: `${oc.env:...}`), or one from a
search path of more than MAX_FILES files (`--config-dir ~`, not listed each time), is never
kept. A hit hands out the cached defaults list with this command's value overrides, and a copy
of the merged config, on which Hydra then applies the overrides and fills its `hydra` node as
it always does. Errors are never cached: a composition that fails raises Hydra's own error
from Hydra's own code, every time.

Every composition also deep-copies Hydra's config repository ("to avoid mutating it", its
comment says: the list of sources), and with it the whole ConfigStore that the structured
source refers to (6 ms; the store is a process-wide singleton that composition only reads).
`repository_sharing_the_store` makes Hydra's caching repository with a copy of the sources
that shares the store (patching the source's class would not do: Hydra's plugin scan executes
its module again, and composition then uses the new class).

Where a defaults tree is built (a cache miss: a new group choice), Hydra makes, for every
config file in the tree, a config of all the group choices known so far, which only a default
written as an interpolation (`- db: ${db_choice}`) reads: ~27% of such a composition's CPU.
`interpolation_map_where_read` builds it only for a file that has such a default.

Hydra internals (checked against hydra-core 1.3.8; tests/test_compat.py checks they exist):
`hydra._internal.config_loader_impl.create_defaults_list`, which `load_configuration` calls
by that module-level name, `ConfigLoaderImpl._compose_config_from_defaults_list`,
`CachingConfigRepository.__init__` (which sets `delegate` and `cache`), and
`defaults_list._create_interpolation_map`, called by that module's tree builder."""

import copy
import dataclasses
import os
import pickle

from hydra._internal import config_loader_impl, defaults_list
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import CachingConfigRepository
from hydra.core.config_store import ConfigStore

CHECKED_WITH = {"hydra-core": "1.3.8"}
_create_defaults_list = config_loader_impl.create_defaults_list  # Hydra's, called on a miss
_compose = ConfigLoaderImpl._compose_config_from_defaults_list
_repository_init = CachingConfigRepository.__init__
_interpolation_map = defaults_list._create_interpolation_map
_lists: dict[tuple, object] = {}  # key -> Hydra's DefaultsList for the group overrides only
_merged: dict[int, bytes] = {}  # id of a cached list's defaults -> the merged config, pickled
_cached_defaults: dict[int, list] = {}  # id -> the defaults of each list in _lists
_interpolated: list[bool] = []  # set while a tree is built where a default is an interpolation


def _store_names(node, prefix="") -> list[str]:
    return [
        name
        for key, value in sorted(node.items())
        for name in (
            [f"{prefix}{key}"]
            + (_store_names(value, f"{prefix}{key}/") if isinstance(value, dict) else [])
        )
    ]


#: a search path with more files than this (`--config-dir ~`) is composed without the cache
#: rather than listed before every composition
MAX_FILES = 5_000


def _search_path(repo) -> tuple | None:
    """What a composition can read: every source, each file source's files as they are now
    (None: too many files to list each time)."""
    state: list = [tuple(_store_names(ConfigStore.instance().repo))]
    for source in repo.get_sources():
        state.append(repr(source))
        if source.scheme() != "file":
            continue  # a package's configs (Hydra's own) do not change while tests run
        for folder, _dirs, names in os.walk(source.path):
            for name in names:
                st = os.stat(os.path.join(folder, name))
                state.append((folder, name, st.st_mtime_ns, st.st_size))
            if len(state) > MAX_FILES:
                return None
    return tuple(state)


def cached_defaults_list(repo, config_name, overrides_list, prepend_hydra, skip_missing):
    """Hydra's `create_defaults_list`, built once per group choices and search path. Hydra
    sorts each override the same way (`defaults_list.Overrides`): a sweep is left out, a
    dict value or a key that is no group is a value override, the rest choose groups."""
    groups, values = [], []
    for override in overrides_list:
        if override.is_sweep_override():
            continue
        is_value = isinstance(override.value(), dict) or not repo.group_exists(
            override.key_or_group
        )
        (values if is_value else groups).append(override)
    files = _search_path(repo)
    key = (config_name, tuple(o.input_line for o in groups), prepend_hydra, skip_missing, files)
    found = None if files is None else _lists.get(key)
    if found is None:
        _interpolated.clear()
        found = _create_defaults_list(repo, config_name, groups, prepend_hydra, skip_missing)
        if files is not None and not _interpolated:  # (an interpolated default may read more)
            _lists[key] = found
            _cached_defaults[id(found.defaults)] = found.defaults
    return dataclasses.replace(found, config_overrides=values)


def cached_compose(self, defaults, repo):
    """Hydra's merge of the files a defaults list names, once per cached defaults list; each
    caller gets its own copy (Hydra then sets flags and values on it), unpickled from a
    snapshot: 1.6 ms for a composed train config, where `copy.deepcopy` takes 10 ms (the
    same values, flags and node types: tests/test_configs.py compares the whole config)."""
    if _cached_defaults.get(id(defaults)) is not defaults:
        return _compose(self, defaults, repo)  # a list built for this composition only
    if id(defaults) not in _merged:  # (the list lives in _cached_defaults: its id stays its)
        _merged[id(defaults)] = pickle.dumps(_compose(self, defaults, repo))
    return pickle.loads(_merged[id(defaults)])


def repository_sharing_the_store(self, delegate) -> None:
    """Hydra's `CachingConfigRepository.__init__`, whose deep copy of `delegate` keeps the one
    ConfigStore (a deep copy's memo maps an object to its copy: here, to itself)."""
    store = ConfigStore.instance()
    self.delegate = copy.deepcopy(delegate, {id(store): store})
    self.cache = {}


def interpolation_map_where_read(overrides, defaults, self_added):
    """Hydra's `_create_interpolation_map`, or None where no default of this config file is an
    interpolation: the tree builder reads the map only to resolve those (an override of a
    group by an interpolation makes its default one, and is among `defaults` by then)."""
    if any(default.is_interpolation() for default in defaults):
        _interpolated.append(True)  # this tree is not cached: cached_defaults_list
        return _interpolation_map(overrides, defaults, self_added)
    return None


#: (owner, name, stand-in, Hydra's own)
STAND_INS = [
    (config_loader_impl, "create_defaults_list", cached_defaults_list, _create_defaults_list),
    (ConfigLoaderImpl, "_compose_config_from_defaults_list", cached_compose, _compose),
    (CachingConfigRepository, "__init__", repository_sharing_the_store, _repository_init),
    (defaults_list, "_create_interpolation_map", interpolation_map_where_read, _interpolation_map),
]


def install(patch, own: bool = False) -> None:
    """Put the stand-ins in place with `patch` (a pytest MonkeyPatch, undone by its owner);
    `own=True`: Hydra's own functions (what the stand-ins are compared with)."""
    for owner, name, stand_in, hydras in STAND_INS:
        patch.setattr(owner, name, hydras if own else stand_in)


def check() -> None:
    """Hydra's four functions (as this module found them at import) still take the arguments
    Hydra's `load_configuration` and these stand-ins pass, and the repository's constructor
    still sets only what its stand-in sets."""
    import inspect

    import hydra

    expected = {
        _create_defaults_list: [
            "repo",
            "config_name",
            "overrides_list",
            "prepend_hydra",
            "skip_missing",
        ],
        _compose: ["self", "defaults", "repo"],
        _repository_init: ["self", "delegate"],
        _interpolation_map: ["overrides", "defaults_list", "self_added"],
    }
    import re

    sets = set(re.findall(r"self\.(\w+) *[:=]", inspect.getsource(_repository_init)))
    if sets != {"delegate", "cache"}:
        raise AssertionError(
            f"hydra-core {hydra.__version__}'s CachingConfigRepository sets {sorted(sets)}, "
            f"not delegate and cache (checked against {CHECKED_WITH}): update "
            "tests/helpers/compose_cache.py"
        )
    for function, names in expected.items():
        if list(inspect.signature(function).parameters) != names:
            raise AssertionError(
                f"hydra-core {hydra.__version__}'s {function.__qualname__} no longer takes "
                f"{names} (checked against {CHECKED_WITH}): update tests/helpers/compose_cache.py"
            )
