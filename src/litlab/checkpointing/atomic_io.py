"""Atomic checkpoint writes: a `kill -9` or a power cut during a save never leaves a truncated
`last.ckpt`. The file is written beside its target, flushed to disk, then renamed over it
(`os.replace` is atomic on POSIX and Windows), so a reader sees the old file or the new one.
"""

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
