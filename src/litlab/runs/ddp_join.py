"""The ranks' join, bounded and told: a DDP process whose peers have not started yet (another
node's, typically) says so in one line, and gives up with one line after `ddp_join_timeout`
seconds.

torch's rendezvous otherwise waits in silence for 30 minutes (its collective timeout, which
Lightning passes to `init_process_group`), then fails with a C++ stack dump per retry. Here
the join alone runs under `ddp_join_timeout`; once every rank has joined, the process group
and its store get the collective timeout back (a long checkpoint write or test on rank 0
must not fail the others at 5 minutes). The ranks of a one-machine job (trainer=ddp) first
wait for each other as long as each shows signs of life (`litlab.runs.ddp`), so the
bound counts from a slow rank's last sign of life, not from the others' arrival. Under
torchrun the wait for the other nodes happens in torchrun itself, before litlab starts
(`--rdzv-conf=timeout=SECONDS`, docs/scale.md)."""

import contextlib
import datetime
import logging
import os
import re
import sys
import tempfile
import threading
import types

from litlab.console import FILE_ONLY
from litlab.errors import UserError, one_line

log = logging.getLogger(__name__)
#: seconds of waiting before the line that says what for (at most half the timeout)
NOTICE_S = 5.0
_armed: dict = {}


class JoinFailed(UserError):
    """The processes of a job did not all meet: every rank says it (on another node its line
    is the only one there), exit code 2."""

    every_rank = True


def arm(timeout_s: float | None) -> None:
    """Bound this run's join by `timeout_s` seconds (None: torch's own). Imports nothing: the
    run's early ranks start before torch is imported (runs/ddp). Forgets `meet`'s ranks."""
    _armed.clear()
    _armed["timeout_s"] = timeout_s


def meet(start) -> None:
    """This run's ranks all run on this machine: before the join, they wait for each other
    at `start` (a `ddp.Start`; None: no such wait), whose heartbeat begins now."""
    _armed["start"] = start
    if start is not None:
        start.begin(_armed.get("timeout_s"))


def install_bounded_join() -> None:
    """Route `init_process_group` through the bounded join (idempotent; imports torch)."""
    from litlab.compat import torch as compat

    compat.wrap_init_process_group(_bounded_join)


def _where(kwargs) -> tuple[int, int, str]:
    rank = kwargs.get("rank", -1)
    world = kwargs.get("world_size", -1)
    rank = int(os.environ.get("RANK", "0")) if rank is None or rank < 0 else rank
    world = int(os.environ.get("WORLD_SIZE", "0")) if world is None or world < 0 else world
    address = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    return rank, world, address


def _collective_timeout(args, kwargs) -> datetime.timedelta:
    from torch.distributed import constants

    if kwargs.get("timeout") is not None:
        return kwargs["timeout"]
    backend = str(kwargs.get("backend") or (args[0] if args else "") or "")
    nccl = "nccl" in backend
    return constants.default_pg_nccl_timeout if nccl else constants.default_pg_timeout


def _bounded_join(init, *args, **kwargs):
    """`init_process_group` under `ddp_join_timeout` (see the module's docstring)."""
    import torch.distributed as dist

    from litlab.compat import torch as compat

    timeout_s = _armed.get("timeout_s")
    if timeout_s is None:
        return init(*args, **kwargs)
    collective = _collective_timeout(args, kwargs)
    rank, world, address = _where(kwargs)
    local = _armed.get("start")
    if local is not None:  # every rank on this machine: all have started when this returns
        local.wait(world, timeout_s, _say_now)
    kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
    waiting = (
        f"DDP rank {rank} of {world}: waiting for the job's other processes ({world} in all, "
        f"over every node) to join at {address}; giving up after ddp_join_timeout={timeout_s:g} s"
    )
    with _native_stderr_captured() as console:
        notice = threading.Timer(min(NOTICE_S, timeout_s / 2), _say, (console, waiting))
        notice.daemon = True
        notice.start()
        try:
            init(*args, **kwargs)
        except dist.DistError as err:
            console.failed = True
            raise _failure(err, rank, world, address, timeout_s, local is not None) from None
        finally:
            notice.cancel()
            notice.join()  # its line is written before the console goes back
    compat.set_group_timeout(collective)


def _say(console, line: str) -> None:
    log.info(line, extra=FILE_ONLY)
    os.write(console.fd, f"{line}\n".encode())


def _say_now(line: str) -> None:
    """A line on every rank's console (a child rank's console shows warnings only)."""
    log.info(line, extra=FILE_ONLY)
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


def _failure(err, rank: int, world: int, address: str, timeout_s: float, local: bool) -> JoinFailed:
    """The one line for a join that failed: who is missing, what to do (`local`: every rank
    runs on this machine and had started)."""
    text = one_line(err, limit=300)
    who = f"DDP rank {rank} of {world}"
    if local and "timed out" in text.lower():
        return JoinFailed(
            f"{who}: the job's {world} processes on this machine had all started but did not "
            f"join at {address} within ddp_join_timeout={timeout_s:g} s; check that no other "
            f"program uses MASTER_PORT, or raise ddp_join_timeout"
        )
    if "timed out" not in text.lower():
        reason = re.sub(r"^\[[^\]]*\]\s*", "", text)[:160]  # no c10d file:line
        return JoinFailed(
            f"{who}: the processes of this job cannot meet at {address} ({reason}); check "
            f"MASTER_ADDR and MASTER_PORT"
        )
    joined = re.search(r"(\d+)/(\d+) clients joined", text)
    if joined:
        return JoinFailed(
            f"{who}: only {joined.group(1)} of the job's {joined.group(2)} processes joined at "
            f"{address} within ddp_join_timeout={timeout_s:g} s; start the command on every "
            f"node (same MASTER_ADDR, MASTER_PORT, trainer.num_nodes and trainer.devices), "
            f"or raise ddp_join_timeout"
        )
    if "connect" in text.lower():
        return JoinFailed(
            f"{who}: nothing answered at {address} within ddp_join_timeout={timeout_s:g} s; "
            f"start the job's rank 0 (on the machine at MASTER_ADDR) with the same "
            f"MASTER_PORT, check that this machine reaches it, or raise ddp_join_timeout"
        )
    return JoinFailed(
        f"{who}: the processes of this job did not all join at {address} within "
        f"ddp_join_timeout={timeout_s:g} s; start the command on every node, or raise "
        f"ddp_join_timeout"
    )


@contextlib.contextmanager
def _native_stderr_captured():
    """While the ranks join, what torch's C++ side prints to stderr (a stack dump per failed
    connection attempt) is held back: after a failure it goes to the log file only (the one
    line says it); after a join it is printed as it was. Yields the real console's fd."""
    sys.stderr.flush()
    real = os.dup(2)
    console = types.SimpleNamespace(fd=real, failed=False)  # `failed`: set by the join
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield console
        finally:
            sys.stderr.flush()
            os.dup2(real, 2)
            os.close(real)
            held.seek(0)
            _replay(held.read().decode(errors="replace"), console.failed)


def _replay(text: str, failed: bool) -> None:
    if text and failed:
        log.info("what torch printed while the ranks joined:\n%s", text, extra=FILE_ONLY)
    elif text:
        sys.stderr.write(text)
        sys.stderr.flush()
