"""The watchdog of a federated run: `python watchdog.py <driver pid> <mark>`, started by the
driver before Ray. When the driver is gone (`kill -9`, a crash, or its own exit), it ends every
process that carries the run's mark in its environment (Ray's GCS, raylet, agents and
workers: they all inherit it), then exits. Ray's processes outlive a killed driver otherwise
(DashboardAgent and RuntimeEnvAgent were seen re-parented to init).

Standalone on purpose (imports psutil only, not litlab): it starts in ~0.1 s, in its own
session, so a Ctrl-C sent to the terminal's process group does not end it before its work.
"""

import os
import sys
import time

MARK = "LITLAB_FEDERATE_RUN"
POLL_S = 0.5


def marked(mark: str, exclude: set[int]) -> list:
    """Live processes of this user whose environment carries MARK=mark."""
    import psutil

    found = []
    for p in psutil.process_iter():
        if p.pid in exclude:
            continue
        try:
            if p.environ().get(MARK) == mark:
                found.append(p)
        except (psutil.Error, OSError):
            continue  # other users' processes, or gone meanwhile
    return found


def end_marked(mark: str, exclude: set[int], grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL after `grace_s`, to every marked process; repeated until none is
    left (a dying raylet may start nothing new, but a worker may be mid-start). Returns how
    many were ended."""
    import psutil

    ended = 0
    for _ in range(5):
        left = marked(mark, exclude)
        if not left:
            break
        ended += len(left)
        for p in left:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(left, timeout=grace_s)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=grace_s)
    return ended


def main(driver: int, mark: str) -> None:
    import psutil

    try:
        started = psutil.Process(driver).create_time()
    except psutil.Error:
        started = None
    while True:
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
    end_marked(mark, {os.getpid()})


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
