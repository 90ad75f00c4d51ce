"""Atomic checkpoint writes: a `kill -9` or a power cut during a save never leaves a truncated
`last.ckpt`. The file is written beside its target, flushed to disk, then renamed over it
(`os.replace` is atomic on POSIX and Windows), so a reader sees the old file or the new one.

Nothing is written through a link that leaves a run dir: a resumed run writes into the
folders of an existing run dir, and one of them linking elsewhere (`checkpoints ->
/other/folder`) would have checkpoints written, rewritten or deleted there (`links_out`)."""

import contextlib
import fnmatch
import os
import stat
import tempfile
from pathlib import Path

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from litlab.errors import UserError
from litlab.utils.commands import override

TMP_SUFFIX = ".tmp"


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO with write-to-temp, fsync, rename (local paths; URLs fall back)."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        import torch

        if "://" in str(path):  # s3://, gs://...: fsspec's own transaction
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        _refuse_linked_folder(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda f: torch.save(checkpoint, f))

    def remove_checkpoint(self, path) -> None:
        """Lightning deletes the previous best/last files: never through a linked folder."""
        if "://" not in str(path):
            _refuse_linked_folder(Path(path))
        super().remove_checkpoint(path)


def write_atomic(path: Path, write) -> None:
    """`write(file)` into a temp file beside `path`, flushed to disk, then renamed over it: a
    reader (or a kill) sees the old file or the new one."""
    for stale in path.parent.glob(f".{path.name}.*{TMP_SUFFIX}"):  # left by a killed write
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # make the rename itself durable


def _refuse_linked_folder(path: Path) -> None:
    folder = path.parent
    if not folder.is_symlink():
        return
    run = folder.parent.resolve()
    try:
        target = folder.resolve()
    except (OSError, RuntimeError):  # a loop of links
        target = Path(os.readlink(folder))
    if not target.is_relative_to(run):
        raise UserError(
            f"{folder} is a symbolic link to {target}, outside its run dir {run}: litlab writes "
            f"and deletes no checkpoint through a link that leaves the run dir; replace the "
            f"link with a folder, then resume with {override('ckpt_path', run)}"
        )


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open folders
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


# ----------------------------------------------------------------- links
# Folders a logger wrote for one of its earlier starts and never writes into again: wandb makes
# a new `wandb/offline-run-<time>-<id>` (or `run-...`) at every start, resumed runs included,
# and links its core log from inside it to `~/.cache/wandb/logs`. Such a folder is checked
# itself (a link out is refused) but not entered: nothing is written through what it holds.
SEALED = ("wandb/run-*", "wandb/offline-run-*")


def _sealed(root: Path, folder: Path) -> bool:
    relative = folder.relative_to(root).as_posix()
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in SEALED)


def links_out(run: Path) -> tuple[Path, Path | None] | None:
    """(link, where it leads; None for a hard link) of the first way out of `run`, else None:
    a symbolic link inside it whose target lies outside it, or a file hard-linked from
    elsewhere (it has more names than the run dir holds). A resumed run writes its checkpoints,
    logs and config records into its folders, and must never write (nor rewrite or delete old
    checkpoints) through one."""
    root = Path(run).resolve()
    names: dict[tuple, list] = {}  # (device, inode) -> [link count, paths in the run dir...]
    for folder, dirs, files in os.walk(root):  # a linked folder is listed, never entered
        for name in sorted([*dirs, *files]):
            path = Path(folder) / name
            try:
                st = path.lstat()
            except OSError:  # gone meanwhile
                continue
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = path.resolve()
                except (OSError, RuntimeError):  # a loop of links: leads nowhere inside
                    return path, Path(os.readlink(path))
                if not target.is_relative_to(root):
                    return path, target
            elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                names.setdefault((st.st_dev, st.st_ino), [st.st_nlink]).append(path)
        dirs[:] = [d for d in dirs if not _sealed(root, Path(folder) / d)]  # checked, not entered
    for count, *paths in names.values():
        if len(paths) < count:
            return paths[0], None  # where its other names are is not known
    return None


def check_links(run: Path) -> None:
    """One line when a run to resume holds a link out of it (`links_out`): checked with the
    run dir's location (`runs.run_dir.check_location`), before Hydra writes into it."""
    found = links_out(run)
    if found is not None:
        link, target = found
        raise UserError(
            f"cannot resume {run}: {link.relative_to(Path(run).resolve())} is "
            + (f"a symbolic link to {target}" if target else "a hard link to a file elsewhere")
            + ", outside the run dir, and litlab writes nothing through a link that "
            f"leaves its run dir; replace the link with the folder's contents, or start a new "
            f"run from its checkpoint: {override('ckpt_path', Path(run) / 'checkpoints' / 'last.ckpt')}"
        )
