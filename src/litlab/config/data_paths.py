"""Where a run's data is, written so that it still holds from another folder.

A relative `data.path=mydata/t.csv` means "from the folder I am in": stored as typed, the
checkpoint's config would name another file (or none) for `cd notebooks && python
../src/eval.py ...`, and a printed resume command run from the project root would too. So
the file and folder keys of the data config (`data.path`, `data.root`, `data.*_dir`,
`data.*_file`, and `paths.data_dir` they interpolate) are made absolute when a run starts
(`absolute`: the stored config holds those; provenance.json keeps the text as typed), the
`data_overrides` of eval, export and compress when they are read (`absolute_values`), and
the overrides a printed resume command repeats (`absolute_override`)."""

import os
import re

from omegaconf import DictConfig, OmegaConf, open_dict

#: an override value that is a plain path to Hydra: printed unquoted (anything else is quoted)
_PLAIN = re.compile(r"^[\w\-./:~@+%]+$")


def is_data_path(name: str) -> bool:
    """A key of a data config that names a file or folder."""
    return name in ("path", "root") or name.endswith(("_dir", "_file"))


def _relative(value) -> bool:
    return (
        isinstance(value, str)
        and value not in ("", "???")
        and "://" not in value
        and "${" not in value
        and not os.path.isabs(value)
    )


def absolute(cfg: DictConfig) -> dict[str, str]:
    """Make each relative file or folder of `paths.data_dir` and `cfg.data` absolute (from the
    working folder); returns {dotted key: value as typed} of those changed. Interpolated
    keys that resolve to an absolute path keep their interpolation."""
    typed = {}
    nodes = [("paths", ("data_dir",)), ("data", None)]
    for group, names in nodes:
        node = cfg.get(group) if isinstance(cfg, DictConfig) else None
        if not isinstance(node, DictConfig):
            continue
        for name in names or [k for k in node if isinstance(k, str) and is_data_path(k)]:
            if name not in node or OmegaConf.is_missing(node, name):
                continue
            value = OmegaConf.select(node, name, throw_on_resolution_failure=False)
            if _relative(value):
                with open_dict(node):
                    node[name] = os.path.abspath(value)
                typed[f"{group}.{name}"] = value
    return typed


def absolute_values(data: dict | None) -> dict | None:
    """`data_overrides` with each relative file or folder made absolute (from the working
    folder): the run they build, and a checkpoint that stores it, read the same files from
    any folder."""
    if not data:
        return data
    return {
        k: os.path.abspath(v) if is_data_path(str(k)) and _relative(v) else v
        for k, v in data.items()
    }


def absolute_override(override: str) -> str:
    """A command-line override (`data.path=mydata/t.csv`) with a relative file or folder made
    absolute, for a command printed to be run again from another folder; others unchanged.
    A value Hydra would read as more than a plain string (quoted, a list, a sweep) stays."""
    key, sep, value = override.partition("=")
    parts = key.lstrip("+~").split(".")
    names_path = (parts[0] == "paths" and len(parts) == 2) or (
        parts[0] in ("data", "data_overrides") and len(parts) == 2 and is_data_path(parts[1])
    )
    if not sep or not names_path or key.startswith("~") or not _PLAIN.match(value):
        return override
    if not _relative(value) or value == "null":
        return override
    resolved = os.path.abspath(value)
    if not _PLAIN.match(resolved):
        return override  # an absolute path Hydra would need quoted: left as typed
    return f"{key}={resolved}"
