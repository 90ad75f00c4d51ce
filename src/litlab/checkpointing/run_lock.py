"""One process per run dir: a run being trained or resumed holds `<run dir>/.run.lock`.

Two `train.py ckpt_path=<run dir>` started together would both append the same epochs to
metrics.csv and write the same checkpoints. The lock is an OS file lock (`fcntl.flock`), so
the kernel drops it when its process dies, however it dies: a stale lock is taken over with no
clean-up step, and the file only says who held it last (PID and host, for the refusal line).
Where the filesystem has no flock, the PID in the file decides: a live process on this host
keeps the run. The file is data (a crafted one: never opened through a link, nor if it is no
regular file or a hard link, which writing the lock would overwrite). A sweep dir is locked
alike (`runs.sweep_dir.SweepLock`).

    with RunLock(run_dir): ...   # acquire() raises a UserError naming the PID that holds it
"""

import errno
import os
import re
import socket
import stat
from pathlib import Path
from typing import Self

from litlab.errors import UserError

LOCK_FILE = Path(".run.lock")  # beside .hydra/, which marks a run that already started
HOST = re.compile(r"[A-Za-z0-9][\w.-]{0,252}")  # what a holder's host may look like when printed


class RunLock:
    file = LOCK_FILE
    shared = False  # True: processes that may work in the folder together share the lock

    def __init__(self, run_dir, note: str = ""):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / self.file
        self.note = note  # a second line of the file: what holds the lock (SweepLock: its command)
        self._fd: int | None = None

    def _read(self) -> list[str]:
        """The lock file's first lines, read as data: never through a link nor from anything
        but a regular file, at most 4 KiB (the file may have been crafted)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return []
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return []
            return os.pread(fd, 4096, 0).decode("utf-8", "replace").splitlines()
        finally:
            os.close(fd)

    def holder(self) -> tuple[int, str] | None:
        """(PID, host) written by the last process that held the lock, if any (a host that is
        not a plain host name reads as `?`)."""
        try:
            pid, host = self._read()[0].split()[:2]
            return int(pid), host if HOST.fullmatch(host) else "?"
        except (IndexError, ValueError):
            return None

    def holder_note(self) -> str:
        """The note the holder wrote (raw text of the file: the caller checks it)."""
        lines = self._read()
        return lines[1] if len(lines) > 1 else ""

    def refusal(self, who: str) -> UserError:
        return UserError(
            f"the run dir {self.run_dir} is in use by {who} (lock {self.path}); wait for that "
            f"process to end or stop it, then resume (a dead process's lock is taken over)"
        )

    def _refusal(self) -> UserError:
        pid, host = self.holder() or (0, "?")
        return self.refusal(f"PID {pid}" + ("" if host == socket.gethostname() else f" on {host}"))

    def _open(self) -> int:
        """The lock file, opened (made if absent) never through a link, and a regular file."""
        try:  # never through a link: a crafted run dir's lock could point at any file
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise
            what = "a symbolic link" if err.errno == errno.ELOOP else "not a regular file"
            raise UserError(f"{self.path} is {what}; remove it (a lock is a plain file)") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:  # a FIFO, a device: never a lock
            os.close(fd)
            what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "a hard link"
            raise UserError(
                f"{self.path} is {what} (writing the lock would overwrite the file's other "
                f"names); remove it (a lock is a plain file of its own)"
            )
        return fd

    def probe(self) -> None:
        """The refusal `acquire` would raise while another process holds the lock, found
        without making or writing anything (a check before the command writes)."""
        import fcntl

        if self._fd is not None or not os.path.lexists(self.path):
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:  # a link, a socket: `acquire` says what it is
            return
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._refusal() from None
        except OSError:  # no flock here, or not a regular file: `acquire` decides
            return
        finally:
            os.close(fd)  # closing drops the probe's own lock

    def acquire(self) -> Self:
        import fcntl

        if self._fd is not None:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = self._open()
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
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
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n{self.note}\n".encode())
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
            if not self.shared:  # a shared lock's file may name another holder still
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
