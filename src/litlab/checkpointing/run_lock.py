"""One process per run dir: a run being trained or resumed holds `<run dir>/.run.lock`.

Two `train.py ckpt_path=<run dir>` started together would both append the same epochs to
metrics.csv and write the same checkpoints. The lock is an OS file lock (`fcntl.flock`), so
the kernel drops it when its process dies, however it dies (kill -9, a node lost): a stale
lock is taken over with no clean-up step, and the file only says who held it last (PID and
host, for the refusal line). Where the filesystem has no flock, the PID in the file decides:
a live process on this host keeps the run; a dead one's lock is taken over.

    lock = RunLock(run_dir).acquire()   # UserError naming the PID that holds it
    ...
    lock.release()                      # or: with RunLock(run_dir): ...
"""

import errno
import os
import socket
from pathlib import Path
from typing import Self

from litlab.errors import UserError

LOCK_FILE = Path(".run.lock")  # beside .hydra/, which marks a run that already started


class RunLock:
    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def holder(self) -> tuple[int, str] | None:
        """(PID, host) written by the last process that held the lock, if any."""
        if self.path.is_symlink():
            return None
        try:
            pid, host = self.path.read_text().split()[:2]
            return int(pid), host
        except (OSError, ValueError):
            return None

    def _refusal(self) -> UserError:
        pid, host = self.holder() or (0, "?")
        who = f"PID {pid}" + ("" if host == socket.gethostname() else f" on {host}")
        return UserError(
            f"the run dir {self.run_dir} is in use by {who} (lock {self.path}); wait for that "
            f"process to end or stop it, then resume (a dead process's lock is taken over)"
        )

    def acquire(self) -> Self:
        import fcntl

        if self._fd is not None:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:  # never through a link: a crafted run dir's lock could point at any file
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise UserError(
                f"{self.path} is a symbolic link; remove it (a run's lock is a plain file)"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._refusal() from None
        except OSError as err:  # no flock on this filesystem: the PID in the file decides
            if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                os.close(fd)
                raise
            if self._held_by_live_process():
                os.close(fd)
                raise self._refusal() from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def _held_by_live_process(self) -> bool:
        held = self.holder()
        if held is None or held[0] == os.getpid() or held[1] != socket.gethostname():
            return False
        try:
            os.kill(held[0], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # alive, another user's
        return True

    def release(self) -> None:
        """Unlock (the file stays: removing it could let two processes lock two files)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
