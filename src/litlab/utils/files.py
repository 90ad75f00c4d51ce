"""What a file a run reads must be: a regular file. Opening a pipe blocks until someone writes
to it (a run waiting forever), a device never ends (a link to /dev/zero) or is no data at all;
every reader of a user's file (a checkpoint, a table, an image, a mask, a volume) asks here
before it opens one, so each is refused alike, in one line naming it.

A download attempt that leaves nothing behind when it fails, and prints nothing meanwhile.

torchvision and PyG print each mirror they try ("Downloading...", "Failed to download (trying
next)") before an offline run reaches its one-line error, and they create their folders
(`data/MNIST/raw`, `data/Planetoid`) before the first byte arrives. Inside `fetching(folder)`
their output (and PyG's "Processing... Done!" the first time it reads a dataset) is held back,
and goes to the run's log file only if the attempt succeeds; on failure the folders the
attempt created are removed again if they hold nothing (a lock file aside)."""

import contextlib
import io
import logging
import os
import stat
from pathlib import Path

from litlab.errors import UserError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_type(path: str | Path, follow: bool = True) -> str | None:
    """What `path` is when it exists and is no regular file: "a pipe", "a device", ... (links
    followed, or with `follow=False` "a link"); None for a regular file or nothing at all."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except OSError:  # absent, a dangling link, or unreadable: the caller's own check says
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISLNK, "a link"), *_KINDS)
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def check_regular(path: str | Path, named: str, valid: str) -> None:
    """One line when `path` exists and is no regular file: `named` names it (`ckpt_path=X`,
    `data.root=R: images/a.png`), `valid` says what it should be. So is a file whose path
    holds a control character (a newline, a tab, an escape): every message, predictions.csv
    row and printed command that names it would be cut in two or rewrite the terminal."""
    if any(ord(c) < 32 or ord(c) == 127 for c in str(path)):  # its folders' names too
        raise UserError(
            f"{str(path)!r}: its path holds a control character, which would cut the lines and "
            f"CSV rows that name it in two; rename it ({valid})"
        )
    kind = file_type(path)
    if kind is not None:
        raise UserError(f"{named} is not a regular file ({kind}); {valid}")


# -------------------------------------------------------------- fetching
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
