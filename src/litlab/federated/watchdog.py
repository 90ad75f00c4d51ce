"""The watchdog of a federated run: `python watchdog.py <driver pid> <mark>`, started by the
driver before Ray. When the driver is gone (`kill -9`, a crash, a signal, its own exit), it
ends every process of the run: Ray's agents outlived a killed driver by about two minutes.
A process of the run carries the mark in its environment, or was seen descending from the
driver (`Tree`): Ray's agents set their process title over their environment's memory, and
are re-parented to init when the raylet dies. Standalone on purpose (psutil only, not
litlab): it starts in ~0.1 s, in its own session, so a Ctrl-C to the terminal's process
group does not end it before its work."""

import contextlib
import os
import sys
import time

MARK = "LITLAB_FEDERATE_RUN"
POLL_S = 0.5


class Tree:
    """The driver's descendants as seen so far (pid -> start time: a reused pid is not
    theirs), `seen()` every poll while the driver lives."""

    def __init__(self, root: int):
        self.root, self.known = root, {}

    def seen(self) -> None:
        import psutil

        try:
            children = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return
        for p in children:
            with contextlib.suppress(psutil.Error):
                self.known.setdefault(p.pid, p.create_time())

    def alive(self, exclude: set[int]) -> list:
        """The known descendants that still run (their own descendants too)."""
        import psutil

        found = {}
        for pid, started in self.known.items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if pid not in exclude and p.create_time() == started:
                    found[pid] = p
                    found.update((c.pid, c) for c in p.children(recursive=True))
        return [p for pid, p in found.items() if pid not in exclude]


def marked(mark: str, exclude: set[int]) -> list:
    """Live processes of this user whose environment carries MARK=mark."""
    import psutil

    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):  # other users' processes, or gone
            if p.pid not in exclude and p.environ().get(MARK) == mark:
                found.append(p)
    return found


def end_marked(mark: str, exclude: set[int], grace_s: float = 3.0, tree: Tree | None = None):
    """SIGTERM, then SIGKILL after `grace_s`, to every marked process and every one of `tree`;
    repeated until none is left (a dying raylet may start nothing new, but a worker may be
    mid-start). Returns how many were ended."""
    import psutil

    ended = 0
    for _ in range(5):
        left = {p.pid: p for p in marked(mark, exclude)}
        if tree is not None:
            left.update((p.pid, p) for p in tree.alive(exclude) if p.pid not in left)
        left = list(left.values())
        if not left:
            break
        ended += len(left)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(left, timeout=grace_s)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=grace_s)
    return ended


def watch_driver(driver: int, mark: str) -> None:
    import psutil

    try:
        started = psutil.Process(driver).create_time()
    except psutil.Error:
        started = None
    tree = Tree(driver)
    while True:
        tree.seen()
        try:
            alive = (
                started is not None
                and psutil.Process(driver).create_time() == started
                and psutil.Process(driver).status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            alive = False
        if not alive:
            break
        time.sleep(POLL_S)
    end_marked(mark, {os.getpid()}, tree=tree)


if __name__ == "__main__":
    watch_driver(int(sys.argv[1]), sys.argv[2])
