"""What a file a run reads must be: a regular file. Opening a pipe blocks until someone writes
to it (a run waiting forever), a device never ends (a link to /dev/zero) or is no data at all;
every reader of a user's file (a checkpoint, a table, an image, a mask, a volume) asks here
before it opens one, so each is refused alike, in one line naming it."""

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
    `data.root=R: images/a.png`), `valid` says what it should be."""
    kind = file_type(path)
    if kind is not None:
        raise UserError(f"{named} is not a regular file ({kind}); {valid}")
