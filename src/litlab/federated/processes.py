"""Ray's processes for one federated run: started, stopped on a signal, never left behind.

The watchdog (watchdog.py) ends the run's processes when the driver dies, whatever killed
it (`kill -9` included); at every normal end the driver ends them itself. SIGTERM and Ctrl-C
end the round in progress at once: the finished rounds are on disk (the recipe saves under
`save_lock`, which the handler waits for), the process exits with 128 + the signal, and the
watchdog ends the workers. The driver does not end them itself: once its raylet is gone, Ray's core worker exits
the process with status 1 from a thread of its own, which under load came before the
handler's exit. Ray is started here, in the main thread, so that these handlers replace the
ones `ray.init` sets."""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from litlab.errors import UserError, one_line
from litlab.federated.watchdog import MARK, Tree, end_marked


class RayDidNotStart(UserError):
    """Ray's own start failed (its raylet waits 30 s for the GCS: a very busy machine)."""

    exit_code = 1


START_ATTEMPTS = 3
#: Ray's timeouts for its agents and workers to come up (30 s, 60 s by default): importing ray
#: takes longer than 30 s on a busy 2-core machine (the raylet then exits). Set when unset.
RAY_TIMEOUTS = {
    "RAY_agent_register_timeout_ms": "180000",
    "RAY_worker_register_timeout_seconds": "180",
}

#: the folder of the sitecustomize that Ray's processes run first
RAY_SITE = Path(__file__).with_name("ray_site")

#: held while a round's checkpoint and history are written; a signal waits for it
save_lock = threading.Lock()
SAVE_WAIT_S = 60


@contextlib.contextmanager
def marked_run():
    """Mark this run's processes and watch them; end them all on exit. Yields `end()`."""
    mark = uuid.uuid4().hex
    os.environ[MARK] = mark
    watchdog = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("watchdog.py")), str(os.getpid()), mark],
        start_new_session=True,  # a Ctrl-C to the terminal's group does not end it early
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != MARK},
    )
    import psutil

    # Ray's agents show no environment (no mark): known by descent from this process, but for
    # the children it had before Ray (they are not the run's to end)
    tree = Tree(os.getpid())
    exclude = {os.getpid(), watchdog.pid, *(p.pid for p in psutil.Process().children(True))}

    def end() -> None:
        tree.seen()
        end_marked(mark, exclude, grace_s=3.0, tree=tree)

    try:
        yield end
    finally:
        tree.seen()  # before ray.shutdown re-parents the agents to init
        with contextlib.suppress(Exception):
            import ray

            if ray.is_initialized():
                ray.shutdown()
        end()
        os.environ.pop(MARK, None)
        watchdog.kill()
        watchdog.wait()


AGENT_PORTS = (
    "metrics_agent_port",
    "metrics_export_port",
    "dashboard_agent_listen_port",
    "runtime_env_agent_port",
)


def _free_port() -> int:
    import socket

    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def agents_on_given_ports():
    """During `ray.init`: Ray's agents get their ports up front, so the raylet waits for none.

    Ray 2.55's raylet waits at most 15 s for each port file its Python agents write, then
    aborts; importing ray took 12-36 s on a loaded 2-core machine (0 of 12 starts). Given the
    ports (Ray's node parameters and the raylet's flags, which `ray.init` has no argument
    for), it uses them as they are. If Ray's internals are not the expected ones, nothing is
    changed."""
    from litlab.compat.ray import node_and_services

    internals = node_and_services()
    if internals is None:
        yield
        return
    node, services = internals
    ports: dict[str, int] = {}
    node_init, start_process = node.Node.__init__, services.start_ray_process

    def patched_init(self, ray_params, *args, **kwargs):
        if all(hasattr(ray_params, name) for name in AGENT_PORTS):
            for name in AGENT_PORTS:
                ports[name] = _free_port()
                setattr(ray_params, name, ports[name])
        return node_init(self, ray_params, *args, **kwargs)

    def patched_start(command, process_type, *args, **kwargs):
        if process_type == "raylet" and "dashboard_agent_listen_port" in ports:
            port = ports["dashboard_agent_listen_port"]
            command = [*command, f"--dashboard_agent_listen_port={port}"]
        return start_process(command, process_type, *args, **kwargs)

    node.Node.__init__, services.start_ray_process = patched_init, patched_start
    try:
        yield
    finally:
        node.Node.__init__, services.start_ray_process = node_init, start_process


def init_ray(backend: dict, end, attempts: int = START_ATTEMPTS) -> None:
    """`ray.init` as Flower's Ray backend calls it (which then finds Ray running), with the
    agents' ports given (`agents_on_given_ports`). A start that fails anyway is retried after
    its processes are ended."""
    import ray

    # ray_site/sitecustomize.py runs first in each of Ray's processes (and defers a grammar
    # that costs each ~1.8 s of its start-up)
    pythonpath = os.pathsep.join([str(RAY_SITE), *sys.path])
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    os.environ["PYTHONPATH"] = pythonpath
    for key, value in RAY_TIMEOUTS.items():  # Ray's processes read them from the environment
        os.environ.setdefault(key, value)
    for attempt in range(1, attempts + 1):
        try:
            with agents_on_given_ports():
                ray.init(
                    runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
                    # Ray's own start lines ("Started a local Ray instance") stay off the console
                    **{"logging_level": logging.WARNING, **backend["init_args"]},
                )
            return
        except Exception as err:  # noqa: BLE001  (Ray raises plain Exception on a failed start)
            with contextlib.suppress(Exception):
                ray.shutdown()
            end()
            if attempt == attempts:
                raise RayDidNotStart(
                    f"Ray did not start ({attempts} tries): {one_line(err)} (a busy machine? "
                    "try again, or lower federate.backend.init_args.num_cpus)"
                ) from None
            logging.getLogger(__name__).warning(
                "Ray did not start (%s); trying again (%d of %d)",
                one_line(err),
                attempt + 1,
                attempts,
            )


def simulate(server_main, client_app, num_clients: int, backend: dict, stopped) -> None:
    """Flower's `run_simulation` of `server_main(grid)` and `client_app`, with this module's
    process handling; `stopped(signame)` is the line printed when a signal ends the run."""
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    server_app = ServerApp()

    @server_app.main()
    def main(grid, context) -> None:
        server_main(grid)

    original = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with marked_run() as end:
        init_ray(backend, end)  # sets Ray's own handlers, replaced below

        def on_signal(signum, frame) -> None:
            # Flower's runtime goes on training after a KeyboardInterrupt (its worker threads):
            # this process exits here, with the finished rounds saved; the watchdog, seeing
            # the driver gone, ends Ray's processes
            name = signal.Signals(signum).name
            try:
                got = save_lock.acquire(timeout=SAVE_WAIT_S)  # a save in progress completes
                print(
                    f"\n{stopped(name if got else name + ' (a save did not finish)')}",
                    file=sys.stderr,
                    flush=True,
                )
                logging.shutdown()
                sys.stdout.flush()
            finally:  # whatever printing raised: the exit code says which signal
                os._exit(128 + signum)

        for s in original:
            signal.signal(s, on_signal)
        try:
            run_simulation(
                server_app, client_app, num_supernodes=num_clients, backend_config=backend
            )
        finally:
            for s, handler in original.items():
                signal.signal(s, handler)
