"""The data folders of a checkpoint's stored config are this machine's, never the file's.

A datamodule reads, downloads and writes caches in the folders its config names (`data_dir`,
`cache_dir`: PyG's processed/, downloads, the NIfTI cache). Taken from a crafted file, such a
folder would be created and filled wherever the file says; taken from a colleague's file, it
names a folder of their machine. So each `data.*_dir` moves from the data dir of the run that
wrote the checkpoint (its stored `paths.data_dir`) to this command's."""

from litlab.checkpointing.trust import refusal, shown


def here(config: dict, data_dir, source: str, overridden=()) -> dict:
    """`config` with each `data.*_dir` moved from its run's data dir to `data_dir`
    (`/their/data/medmnist` -> `<data_dir>/medmnist`); a folder outside its run's data dir is
    refused, unless this command names it (`overridden`: its data_overrides)."""
    from pathlib import PurePath

    data, paths = config.get("data"), config.get("paths")
    if not isinstance(data, dict):
        return config
    theirs = paths.get("data_dir") if isinstance(paths, dict) else None
    moved = dict(data)
    for key, value in data.items():
        if not (isinstance(key, str) and key.endswith("_dir")) or value is None:
            continue
        if key in overridden:  # this command names the folder
            continue
        inside = isinstance(theirs, str) and isinstance(value, str)
        if inside:
            try:
                rel = PurePath(value).relative_to(theirs)
            except ValueError:
                inside = False
        if not inside or ".." in rel.parts:
            raise refusal(
                source,
                f"names data.{key}={shown(value)}, outside the data dir of its run "
                f"({shown(theirs)}); litlab writes data only where this command says: pass "
                f"+data_overrides.{key}=FOLDER",
            )
        moved[key] = str(PurePath(data_dir) / rel)
    # the run as rebuilt here: a checkpoint derived from it (a compress step) says so
    paths = {**(paths if isinstance(paths, dict) else {}), "data_dir": str(data_dir)}
    return {**config, "data": moved, "paths": paths}
