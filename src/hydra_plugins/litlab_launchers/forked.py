"""CPU jobs of `hydra/launcher=parallel` forked from the launcher, which has torch and Lightning
imported already (it checked the sweep's configs with them).

Why: a job in a fresh interpreter imports torch, Lightning, torchmetrics and scikit-learn again,
about 6 s of one core on an idle 2-core machine, where a digits job trains 10 epochs in 2 s
(BENCHMARKS.md, "Parallel sweeps"): two jobs at once took longer than one after the other in
the basic launcher's warm process. A forked job starts in milliseconds.

When a job is not forked (`can_fork` says why not), it starts as a fresh interpreter:
- on GPUs: CUDA is not usable in a child forked after the parent touched it, and the launcher's
  checks may have asked CUDA for its devices; a GPU job's start-up is small against its work;
- when the launcher runs a thread it did not have when it was set up (a logger's thread, an
  OpenMP pool): a forked child holds a copy of whatever lock that thread held, and GNU OpenMP
  hangs in the child of a process that started its pool (measured: a forked child's first
  parallel op never returned). The launcher keeps its own torch on one thread (`prepare`).

Jobs still run the sweep's code snapshot: the child imports every module it has not imported
yet from the snapshot (`snapshot.import_from`), and the modules the launcher imported are the
code the snapshot was taken from, seconds earlier.
"""

import contextlib
import logging
import os
import signal
import sys
import traceback
from pathlib import Path

# what every litlab job imports besides what the sweep's checks did (torch, Lightning):
# scikit-learn for the splits and folds of every domain, which brings pandas (~1.3 s of one core
# per job on an idle machine, measured in a forked digits job). Imported once, before any fork:
# the jobs that start later in a sweep of more jobs than slots no longer import it
PRELOAD = ("torch", "lightning.pytorch", "sklearn.model_selection")


def prepare() -> int:
    """When the launcher is set up: import what every job needs, and keep this process's own
    torch work (it has none planned) on one thread, so no OpenMP pool can start in it; returns
    its thread count then."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # the job imports it itself (or says it is missing)
            pass
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    return _native_threads()


def can_fork(slots, threads_at_setup: int) -> bool:
    """Fork when no job gets GPUs, no Python thread runs besides the main one, and no native
    thread started since the launcher was set up (those present then are the idle servers of
    OpenBLAS and jemalloc, which stop and restart around a fork by themselves)."""
    import threading

    if any(slot.gpus is not None for slot in slots) or not hasattr(os, "fork"):
        return False
    return threading.active_count() == 1 and 0 < _native_threads() <= threads_at_setup


def _native_threads() -> int:
    """Threads of this process (Linux: /proc/self/task); 0 where that cannot be read."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


class ForkedJob:
    """A forked job as the launcher handles a `subprocess.Popen`: pid, poll, wait, send_signal,
    returncode (negative: ended by that signal)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)


def start(run, env: dict[str, str], output: Path, code: Path) -> ForkedJob:
    """Fork the job `run` (no arguments; it writes its own result) with `env` added to its
    environment, its console going to `output` until it knows its run dir, in a session of its
    own (as `start_new_session=True`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedJob(pid)
    status = 1
    try:  # the child: it never returns into the launcher's code
        _become_a_job(env, output, code)
        run()
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001  (said on the job's console, as an interpreter would)
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream cannot be flushed
                stream.flush()
        logging.shutdown()
        os._exit(status)
    raise AssertionError("unreachable")  # pragma: no cover


def _become_a_job(env: dict[str, str], output: Path, code: Path) -> None:
    from hydra_plugins.litlab_launchers.parallel_job import console_to
    from litlab.utils import code_state as snapshot

    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the launcher's stop handlers, as at exec
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    console_to(output)
    snapshot.import_from(code)
