"""Atomic checkpoint writes: a `kill -9` or a power cut during a save never leaves a truncated
`last.ckpt`. The file is written beside its target, flushed to disk, then renamed over it
(`os.replace` is atomic on POSIX and Windows), so a reader sees the old file or the new one.
Nor is a checkpoint written or deleted through a checkpoint folder that is a symbolic link out
of its run dir (`<run>/checkpoints -> /elsewhere`): a resume refuses such a run dir before it
starts (`links.check_links`), and a link made while a run goes is refused here."""

import os
import tempfile
from pathlib import Path

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

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
        for stale in path.parent.glob(f".{path.name}.*{TMP_SUFFIX}"):  # left by a killed save
            stale.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)  # make the rename itself durable

    def remove_checkpoint(self, path) -> None:
        """Lightning deletes the previous best/last files: never through a linked folder."""
        if "://" not in str(path):
            _refuse_linked_folder(Path(path))
        super().remove_checkpoint(path)


def _refuse_linked_folder(path: Path) -> None:
    folder = path.parent
    if not folder.is_symlink():
        return
    run = folder.parent.resolve()
    try:
        target = folder.resolve()
    except (OSError, RuntimeError):  # a loop of links
        target = Path(os.readlink(folder))
    if target != run and run not in target.parents:
        from litlab.errors import UserError
        from litlab.utils.commands import override

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
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
