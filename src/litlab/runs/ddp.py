"""The DDP lifecycle of a run, in one place: `with lifecycle(cfg, script) as ddp:` starts the
ranks, `ddp.callback()` (given to the Trainer) hands them to Lightning, and leaving the block
ends them together. The plumbing below is what Lightning + Hydra do not get right on their own.

Lightning's `ddp` strategy re-executes the entry script once per extra local rank, with the
parent's `sys.argv` plus `hydra.run.dir=<hydra.run.dir>`. Under a multirun that re-runs the
whole sweep in every child (a sampling sweeper even draws other hyperparameters), writes into
the wrong folder, and under submitit re-executes submitit's own module.
`install_child_command` replaces that command: a child runs exactly its parent job's overrides,
in the parent job's output dir.

`early_ranks` starts trainer=ddp's other local ranks as soon as the config is composed, where
Lightning starts them at `trainer.fit`: they import torch and build the job alongside rank 0
instead of after it (a 10-epoch digits job: 2 processes took 1.7x one process's wall time,
most of it rank 1's start-up while rank 0 waited). Lightning then finds the ranks' environment
(LOCAL_RANK...) as under torchrun and starts none itself.

`finish` ends a run cleanly: it destroys the process group while all ranks are alive, waits for
the child ranks and fails when one failed. Plain Lightning does neither: rank 0, which hosts the
rendezvous store, can exit while the other ranks' gloo threads still tear down against it (the
likely cause of `terminate called without an active exception`; bench/ddp.py --stress).

The local ranks of `trainer=ddp` wait for each other while they start, however long that takes,
as long as each shows signs of life (`Start`): on a loaded machine one rank took over 300 s to
import torch and build its job, while torch's rendezvous timeout, which runs from the moment a
rank enters it, lost the job for the others. Imports nothing heavy: the ranks begin before
torch is imported."""

import contextlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from litlab.errors import UserError, one_line
from litlab.runs import ddp_join
from litlab.sweeps.parallel_slots import free_port
from litlab.utils.distributed import quiet_rank_console, rank, tag_log_lines

log = logging.getLogger(__name__)
# environment a launch sets in the parent; restored after each job (multiruns start many)
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
# the job's hydra overrides that a child must not repeat (it is a single run, not a sweep)
SWEEP_KEYS = (
    *("hydra/launcher", "hydra/sweeper", "hydra.launcher", "hydra.sweeper", "hydra.sweep"),
    *("hydra.run", "hydra.mode", "hydra.output_subdir"),
)

# set when something else starts the ranks (torchrun, SLURM, MPI, LSF) or we are a child rank
STARTED_ELSEWHERE = (
    *("LOCAL_RANK", "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"),  # torchrun, a child rank
    *("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "LSB_JOBID"),  # SLURM, MPI, LSF
)
STRATEGIES = "lightning.pytorch.strategies"
DDP = ("ddp", f"{STRATEGIES}.DDPStrategy", f"{STRATEGIES}.ddp.DDPStrategy")

_state: dict = {}


def _remember(script: str) -> None:
    """The entry script a child rank re-runs, and the environment before any launch."""
    _state["script"] = os.path.abspath(script)
    _state.setdefault("env", {k: os.environ.get(k) for k in LAUNCH_ENV})


def child_command(local_rank: int) -> tuple[list[str], str]:
    """The command of a child rank: the parent job's script and overrides, its output dir."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    hydra_overrides = [o for o in hc.overrides.hydra if not o.lstrip("~+").startswith(SWEEP_KEYS)]
    out = hc.runtime.output_dir.replace("\\", "\\\\").replace('"', '\\"')
    cmd = [
        sys.executable,
        _state["script"],
        *hc.overrides.task,
        *hydra_overrides,
        f'hydra.run.dir="{out}"',
        "hydra.output_subdir=null",
    ]
    return cmd, hc.runtime.cwd


def ddp_processes(trainer_cfg) -> int:
    """How many processes trainer=ddp runs on this node; 0 when Lightning should start them
    itself (another strategy, several nodes, a cluster launcher, devices it has to work out)."""
    strategy = trainer_cfg.get("strategy")
    target = strategy.get("_target_") if isinstance(strategy, Mapping) else strategy
    if (
        target not in DDP
        or any(k in os.environ for k in STARTED_ELSEWHERE)
        or trainer_cfg.get("num_nodes", 1) != 1
        or isinstance(strategy, Mapping)
        and strategy.get("start_method", "popen") != "popen"
    ):
        return 0
    devices, accelerator = trainer_cfg.get("devices"), trainer_cfg.get("accelerator", "auto")
    if isinstance(devices, int) and devices > 0:
        return devices
    if isinstance(devices, str) and "," in devices:  # "0,1": GPU indices
        return len([d for d in devices.split(",") if d.strip()])
    if not isinstance(devices, (int, str)) and devices is not None:  # a list of GPU indices
        return len(devices)
    if devices in ("auto", -1, "-1") and accelerator in ("auto", "gpu", "cuda"):
        from litlab.config.resolvers import certainly_no_gpu

        if certainly_no_gpu():
            return 0  # Lightning's "auto" on the CPU is one process
        import torch

        return torch.cuda.device_count()
    return 0


def _check_reachable(address: str) -> None:
    """The ranks meet over TCP at MASTER_ADDR: say so in one line when they cannot, instead of
    waiting out the 30-minute rendezvous timeout (e.g. loopback down inside `unshare -n`)."""
    try:
        with socket.socket() as server, socket.socket() as client:
            server.bind((address, 0))
            server.listen(1)
            client.settimeout(5)
            client.connect(server.getsockname())
    except OSError as err:
        raise UserError(
            f"trainer=ddp: its processes cannot reach each other at {address} "
            f"({err.strerror or err}); bring the network interface up (for 127.0.0.1: ip link "
            f"set lo up) or train in one process (trainer=cpu)"
        ) from None


@contextlib.contextmanager
def early_ranks(cfg, script: str):
    """Start the other local DDP ranks now (see the module's docstring), running `script`;
    stop them if this process fails before the run ends."""
    try:
        n = ddp_processes(cfg.trainer) if cfg.get("trainer") else 0
    except Exception:  # noqa: BLE001 (a broken trainer config: validation says it in one line)
        n = 0
    procs, start = [], None
    if n > 1:
        _check_reachable(os.environ.get("MASTER_ADDR", "127.0.0.1"))
        _remember(script)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port(set())))
        os.environ.update(NODE_RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(n))
        start = host()  # the ranks wait for each other there while they start
        ddp_join.meet(start)
        for local_rank in range(1, n):
            cmd, cwd = child_command(local_rank)
            env = {**os.environ, "LOCAL_RANK": str(local_rank), ENV: str(start.folder)}
            procs.append(subprocess.Popen(cmd, env=env, cwd=cwd))
            start.procs[local_rank] = procs[-1]
    _state["early_procs"] = procs
    try:
        yield
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if procs:
            _restore_env()
        raise
    finally:
        _state.pop("early_procs", None)
        end_heartbeat(start)


def install_child_command(script: str) -> None:
    """Patch Lightning (in memory) so that DDP children re-run exactly this job (above).

    `script` is the entry point's path (a child re-executes it)."""
    from litlab.compat import lightning as compat

    _remember(script)
    compat.set_ddp_child_command(child_command)
    ddp_join.install_bounded_join()  # the ranks' join: told while it waits, bounded by ddp_join_timeout


def attach(trainer) -> None:
    """Hand the early-started ranks to Lightning's launcher (which kills them when this process
    fails) and watch them as Lightning watches the ones it starts (a dead rank ends the job)."""
    procs = _state.get("early_procs")
    if not procs:
        return
    from litlab.compat import lightning as compat

    launcher = getattr(trainer.strategy, "launcher", None)
    if launcher is not None and hasattr(launcher, "procs"):
        launcher.procs.extend(procs)
    compat.observe_processes(procs)


def describe_ranks(trainer, batch_size: int | None) -> None:
    """Tag rank 0's lines and say how many samples one optimizer step sees."""
    if trainer.world_size <= 1:
        return
    tag_log_lines(trainer.global_rank)
    if batch_size and trainer.global_rank == 0:
        world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
        log.info(
            f"DDP: {world} processes x batch_size {batch_size} x accumulate_grad_batches "
            f"{accumulate} = {world * batch_size * accumulate} samples per optimizer step"
        )


def _restore_env() -> None:
    """Undo the launch's environment: a multirun's next job starts afresh."""
    for key, value in _state.get("env", {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def finish(trainer) -> None:
    """End a distributed run on every rank; rank 0 waits for its children and checks them."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank tears down while another still talks to it
        dist.destroy_process_group()
    procs = getattr(getattr(trainer.strategy, "launcher", None), "procs", None) or []
    procs = [p for p in procs if isinstance(p, subprocess.Popen)]  # ddp_spawn joined its own
    failed = [(i + 1, p.wait()) for i, p in enumerate(procs)]
    failed = [(r, code) for r, code in failed if code != 0]
    _restore_env()
    if failed:
        raise RuntimeError(f"DDP child rank(s) failed: {failed} (local rank, exit code)")


class _Run:
    """What `lifecycle` yields: the callback that joins the Trainer to the started ranks."""

    def __init__(self, script: str, cfg):
        self.script, self.cfg, self.trainer = script, cfg, None

    def callback(self):
        """A Lightning callback for `build.trainer(..., extra_callbacks=[...])`: it makes DDP
        children re-run this job (`install_child_command`), then at setup attaches and describes the ranks."""
        install_child_command(self.script)
        return __getattr__("DDPLifecycle")(self)


def __getattr__(name: str):
    """`DDPLifecycle`, the Lightning side of `lifecycle`: a callback that joins the Trainer to
    the ranks started early. A module-level class (named `litlab.runs.ddp.DDPLifecycle`), so that
    `trainer=ddp_spawn` can pickle it to its workers; made on first use, so that this module,
    imported before Hydra parses, does not import Lightning."""
    if name != "DDPLifecycle":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from lightning.pytorch.callbacks import Callback

    class DDPLifecycle(Callback):
        def __init__(self, run):
            self.run = run  # the lifecycle's `_Run`: script, config, and the Trainer once joined

        def setup(self, trainer, pl_module, stage: str) -> None:
            if self.run.trainer is None:  # fit, then test: the ranks join once
                self.run.trainer = trainer
                attach(trainer)
                describe_ranks(trainer, self.run.cfg.data.get("batch_size"))

    DDPLifecycle.__qualname__ = name  # pickled by reference, found again through this function
    globals()[name] = DDPLifecycle  # made once: later look-ups find it without calling here
    return DDPLifecycle


@contextlib.contextmanager
def lifecycle(cfg, script):
    """A run's ranks from start to end: early start (trainer=ddp), the child command, and a
    clean end on every rank (barrier, process group destroyed, child ranks checked)."""
    run = _Run(str(script), cfg)
    ddp_join.arm(cfg.get("ddp_join_timeout"))  # how long the ranks' join may take
    child_rank = child()  # a child rank of trainer=ddp: alive from now on, for rank 0
    ddp_join.meet(child_rank)
    if rank() > 0:  # a child rank: warnings and errors only (rank 0 says the rest once)
        quiet_rank_console(rank())
    with early_ranks(cfg, str(script)):
        try:
            yield run
        except Exception as err:
            several = run.trainer is not None and run.trainer.world_size > 1
            if not several or (lost := peer_lost(err)) is None:
                raise
            raise lost from None
        finally:
            ddp_join.arm(None)
            end_heartbeat(child_rank)
        if run.trainer is not None:
            finish(run.trainer)  # all ranks end together; fails if a child rank failed
        else:
            _restore_env()


# ------------------------------------------------------------- ddp peers
# what gloo/NCCL/the rendezvous store say when a peer process or node is gone
PEER_GONE = (
    *("Connection closed by peer", "Connection reset by peer", "Broken pipe"),
    *("Connection refused", "NCCL communicator was aborted"),
)


class PeerLost(UserError):
    """Another rank of the job died or became unreachable: this rank stops with one line of its
    own (every rank says it: on another node it is the only line there), exit code 1."""

    exit_code = 1
    every_rank = True


def peer_lost(err: BaseException) -> PeerLost | None:
    """The one-line error for a collective that failed because a peer is gone, else None."""
    import torch.distributed as dist

    dist_error = getattr(dist, "DistError", ())
    if not (isinstance(err, dist_error) or any(s in str(err) for s in PEER_GONE)):
        return None
    reason = re.sub(r"^\[[^\]]*\]\s*", "", one_line(err, limit=400))[:160]  # no gloo file:line
    return PeerLost(
        f"DDP rank {rank()}: another process of this job stopped or cannot be reached "
        f"({reason}); this rank stops too; the failed process's own log (its node's console) "
        f"says why"
    )


# ------------------------------------------------------------- ddp start
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
    """This process's side of the meeting in a folder rank 0 makes (`ENV` tells its child ranks
    where): it touches `<rank>.alive` every second from the moment its run begins (`begin`),
    writes `<rank>.ready` when it reaches the join, then waits for the others (`wait`) before
    torch's rendezvous. A rank that exits before it is ready ends the wait at once; one alive
    but never ready (a deadlocked start) ends it after START_LIMIT_S."""

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
        who = f"DDP rank {self.rank} of {world}"
        proc = self.procs.get(r)
        code = proc.poll() if proc is not None else None
        if code is not None:
            raise ddp_join.JoinFailed(
                f"{who}: rank {r} on this machine stopped (exit code {code}) before it joined; "
                f"its own lines above say why"
            )
        silent = now - self._last_sign(r, now)
        if silent > timeout_s:
            raise ddp_join.JoinFailed(
                f"{who}: rank {r} on this machine showed no sign of life for {silent:.0f} s "
                f"while it started (it has not reached the join: stopped, swapped out or stuck "
                f"on a busy machine); raise ddp_join_timeout (now {timeout_s:g} s), or run "
                f"fewer processes at once (trainer.devices, other jobs on this machine)"
            )

    def _stuck(self, missing: list[int], world: int, now: float) -> None:
        raise ddp_join.JoinFailed(
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
    folder = os.environ.get(ENV)
    return Start(Path(folder), rank()) if folder and rank() > 0 else None


def end_heartbeat(start: Start | None) -> None:
    """Stop this rank's heartbeat; rank 0 removes the folder (the job has ended)."""
    if start is not None:
        start.stop()
        if start.rank == 0:
            shutil.rmtree(start.folder, ignore_errors=True)
