"""The data folders of a checkpoint's stored config are this machine's, never the file's.

A datamodule reads, downloads and writes caches in the folders its config names (`data_dir`,
`cache_dir`: PyG's processed/, downloads, the NIfTI cache). Taken from a crafted file, such a
folder would be created and filled wherever the file says; taken from a colleague's file, it
names a folder of their machine. So each `data.*_dir` moves from the data dir of the run that
wrote the checkpoint (its stored `paths.data_dir`) to this command's.

Except a folder this machine's user chose: one typed on the command line of the run that
wrote the checkpoint (`data.data_dir=/elsewhere`, as the docs show), which the run dir itself
records (`.hydra/overrides.yaml`, and `.hydra/resume-*/` of its resumes). That record is read
only from a real run dir of this user (`user_chosen`): the checkpoint file is inside it (not a
link to elsewhere), the run dir, its record and the checkpoint are owned by this user, and the
record says its run ran in this very folder (Hydra's `runtime.output_dir`). A folder named
only by the file (a checkpoint from elsewhere, a crafted stored config, a file copied out of
its run dir, a run dir copied or unpacked from elsewhere) is still moved or refused."""

import os
from pathlib import Path

from litlab.checkpointing.trust import shown, untrusted_refusal

RECORDS = (".hydra/overrides.yaml", ".hydra/resume-*/overrides.yaml")
MAX_RECORDS = 64  # resumes of one run dir read at most


def here(config: dict, data_dir, source: str, overridden=(), chosen=None) -> dict:
    """`config` with each `data.*_dir` moved from its run's data dir to `data_dir`
    (`/their/data/medmnist` -> `<data_dir>/medmnist`); a folder outside its run's data dir is
    refused, unless this command names it (`overridden`: its data_overrides) or the user
    chose it for the run that wrote the file (`chosen`: `{"data.data_dir": "/elsewhere"}`,
    kept as is)."""
    from pathlib import PurePath

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
        if inside:
            try:
                rel = PurePath(value).relative_to(theirs)
            except ValueError:
                inside = False
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
    import stat

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
