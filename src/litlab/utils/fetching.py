"""A download attempt that leaves nothing behind when it fails, and prints nothing meanwhile.

torchvision and PyG print each mirror they try ("Downloading...", "Failed to download (trying
next)") before an offline run reaches its one-line error, and they create their folders
(`data/MNIST/raw`, `data/Planetoid`) before the first byte arrives. Inside `fetching(folder)`
their output (and PyG's "Processing... Done!" the first time it reads a dataset) is held back,
and goes to the run's log file only if the attempt succeeds; on failure the folders the
attempt created are removed again if they hold nothing (a lock file aside).
"""

import contextlib
import io
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)
# litlab.console.FILE_ONLY (the console module reads the rank from litlab.utils: no import back)
FILE_ONLY = {"console": False}

DISPOSABLE = (".litlab.lock",)  # files that do not make a folder worth keeping


def _prune(folder: Path) -> None:
    """Remove `folder` and its sub-folders when they hold nothing but disposable files."""
    if not folder.is_dir():
        return
    for root, dirs, files in os.walk(folder, topdown=False):
        if all(f in DISPOSABLE for f in files):
            for f in files:
                Path(root, f).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty after all: keep it
                os.rmdir(root)


@contextlib.contextmanager
def fetching(folder):
    folder = Path(folder)
    first_new = None
    for path in (folder, *folder.parents):  # the outermost folder that does not exist yet
        if path.exists():
            break
        first_new = path
    held = io.StringIO()
    try:
        with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held):
            yield
    except BaseException:
        _prune(first_new or folder)
        raise
    if text := held.getvalue().strip():
        log.info("%s", text, extra=FILE_ONLY)
