"""The local ranks of `trainer=ddp` wait for each other while they start, however long that
takes, as long as each shows signs of life.

Every rank of a one-machine job imports torch and builds its data and model before it joins
the others. On a loaded machine that took one rank over 300 s while the others had long been
waiting in torch's rendezvous, whose timeout runs from the moment a rank enters it: the job was
lost, with advice for several machines. Here the ranks first meet in a folder that rank 0
makes (`LITLAB_DDP_START_DIR` tells its child ranks where): each touches `<rank>.alive` every
second from the moment its run begins (`begin`), and writes `<rank>.ready` when it reaches the
join (`wait`). A rank enters torch's rendezvous only when every rank is ready; until then it
waits for each missing one as long as that one's last sign of life is younger than
`ddp_join_timeout`. A rank that exits before it is ready ends the wait at once; one that
stays alive but never gets ready (its heartbeat runs on, its start is deadlocked) ends it
after START_LIMIT_S. Imports nothing heavy: the ranks begin before torch is imported.
"""

import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

#: where the local ranks of a job meet; set by rank 0 for the child ranks it starts
ENV = "LITLAB_DDP_START_DIR"
#: seconds between two signs of life (at most a quarter of the timeout)
BEAT_S = 1.0
#: seconds of waiting for a local rank before the line that says so (at most half the timeout)
NOTICE_S = 30.0
#: seconds a start may take at most, however alive its ranks look: the slowest start seen on a
#: loaded machine took 300 s; one that still has not reached the join after an hour is stuck
START_LIMIT_S = 3600.0


class Start:
    """This process's side of the meeting: its heartbeat, then its wait for the others."""

    def __init__(self, folder: Path, rank: int, procs: dict | None = None):
        self.folder, self.rank = Path(folder), rank
        self.procs = procs or {}  # rank -> Popen: the child ranks this process started
        self.begun = time.time()
        self._ready = threading.Event()
        self._beat_s = BEAT_S
        self.limit_s = START_LIMIT_S

    def begin(self, timeout_s: float | None) -> "Start":
        """Show signs of life from now until this rank is ready (a daemon thread)."""
        if timeout_s is not None:
            self._beat_s = min(BEAT_S, timeout_s / 4)
        self._touch()
        threading.Thread(target=self._beat, name="litlab-ddp-alive", daemon=True).start()
        return self

    def _touch(self) -> None:
        with contextlib.suppress(OSError):  # the folder is gone: the job has ended
            (self.folder / f"{self.rank}.alive").write_text(str(os.getpid()))

    def _beat(self) -> None:
        while not self._ready.wait(self._beat_s):
            self._touch()

    def stop(self) -> None:
        self._ready.set()

    def wait(self, world: int, timeout_s: float, say) -> None:
        """Mark this rank ready, then return when all `world` ranks are; raise `JoinFailed`
        when one exited, or showed no sign of life for `timeout_s` seconds. `say(line)`
        prints the line that tells what it waits for (once, after NOTICE_S)."""
        (self.folder / f"{self.rank}.ready").write_text(str(os.getpid()))
        self.stop()
        notice_at = time.time() + min(NOTICE_S, timeout_s / 2)
        while missing := [r for r in range(world) if not (self.folder / f"{r}.ready").exists()]:
            now = time.time()
            for r in missing:
                self._check(r, world, now, timeout_s)
            if now - self.begun > max(self.limit_s, timeout_s):
                self._stuck(missing, world, now)
            if notice_at is not None and now >= notice_at:
                say(self._waiting(missing, world, now, timeout_s))
                notice_at = None
            time.sleep(min(0.2, timeout_s / 10))

    def _check(self, r: int, world: int, now: float, timeout_s: float) -> None:
        from litlab.runs.ddp_join import JoinFailed

        who = f"DDP rank {self.rank} of {world}"
        proc = self.procs.get(r)
        code = proc.poll() if proc is not None else None
        if code is not None:
            raise JoinFailed(
                f"{who}: rank {r} on this machine stopped (exit code {code}) before it joined; "
                f"its own lines above say why"
            )
        silent = now - self._last_sign(r, now)
        if silent > timeout_s:
            raise JoinFailed(
                f"{who}: rank {r} on this machine showed no sign of life for {silent:.0f} s "
                f"while it started (it has not reached the join: stopped, swapped out or stuck "
                f"on a busy machine); raise ddp_join_timeout (now {timeout_s:g} s), or run "
                f"fewer processes at once (trainer.devices, other jobs on this machine)"
            )

    def _stuck(self, missing: list[int], world: int, now: float) -> None:
        from litlab.runs.ddp_join import JoinFailed

        raise JoinFailed(
            f"DDP rank {self.rank} of {world}: rank(s) {', '.join(map(str, missing))} of this "
            f"machine still alive but not at the join after {now - self.begun:.0f} s, past the "
            f"{self.limit_s:g} s a start may take (stuck while building its data or model: "
            f"its own lines above, or py-spy dump --pid of it, say where)"
        )

    def _last_sign(self, r: int, now: float) -> float:
        """When rank `r` last showed a sign of life: its heartbeat, or for a child rank that
        has not begun its heartbeat yet (Python and Hydra still starting) its running
        process."""
        try:
            return (self.folder / f"{r}.alive").stat().st_mtime
        except OSError:
            proc = self.procs.get(r)
            return now if proc is not None and proc.poll() is None else self.begun

    def _waiting(self, missing: list[int], world: int, now: float, timeout_s: float) -> str:
        ranks = ", ".join(map(str, missing))
        return (
            f"DDP rank {self.rank} of {world}: waiting for rank(s) {ranks} of this machine, "
            f"still starting (importing and building the job) after {now - self.begun:.0f} s; "
            f"waited for while alive, up to ddp_join_timeout={timeout_s:g} s after a rank's "
            f"last sign of life"
        )


def host() -> Start:
    """Rank 0's side: a new meeting folder (its child ranks get its path as `ENV`)."""
    return Start(Path(tempfile.mkdtemp(prefix="litlab-ddp-start-")), 0)


def child() -> Start | None:
    """A child rank's side of the meeting its rank 0 hosts, or None (not started by one)."""
    from litlab.utils.distributed import rank

    folder = os.environ.get(ENV)
    return Start(Path(folder), rank()) if folder and rank() > 0 else None


def end(start: Start | None) -> None:
    """Stop this rank's heartbeat; rank 0 removes the folder (the job has ended)."""
    if start is not None:
        start.stop()
        if start.rank == 0:
            shutil.rmtree(start.folder, ignore_errors=True)
