"""The federated recipe behind `python src/federate.py`: partition, simulate, evaluate, save.

Flower's simulation engine (Ray backend) runs the clients in worker processes; this process
runs the server (strategy + central evaluation). Whatever ends the run (the last round, a
failure, Ctrl-C), Ray is shut down and any process it left is ended before returning.
"""

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


@contextlib.contextmanager
def no_orphans(poll_s: float = 0.5):
    """Shut Ray down and end every process it started (workers, raylet, GCS), on any exit.

    Flower shuts Ray down itself when a simulation ends, and the raylet's workers are then
    re-parented to init: no longer our children, but not always gone (seen here). So the tree
    is watched while the simulation runs, and every process ever seen in it is ended after."""
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    seen: dict[int, psutil.Process] = {}
    done = threading.Event()

    def watch() -> None:
        while True:
            with contextlib.suppress(psutil.Error):
                seen.update({p.pid: p for p in me.children(recursive=True) if p.pid not in before})
            if done.wait(poll_s):
                return

    def end(shutdown_ray: bool = True) -> None:
        """End every process seen (idempotent). From a signal handler (shutdown_ray=False): no
        ray.shutdown, which may wait on the very call the main thread was interrupted in, and
        SIGKILL at once: Ray's driver exits with 1 by itself soon after its raylet dies."""
        done.set()
        seen.update({p.pid: p for p in me.children(recursive=True) if p.pid not in before})
        if shutdown_ray:
            import ray

            with contextlib.suppress(Exception):
                if ray.is_initialized():
                    ray.shutdown()
        left = [p for p in list(seen.values()) if p.is_running()]  # the watcher may add more
        if not shutdown_ray:
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            return
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(left, timeout=5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()

    watcher = threading.Thread(target=watch, daemon=True, name="litlab-process-watch")
    watcher.start()
    try:
        yield end
    finally:
        done.set()
        watcher.join()
        end()


def _strategy(cfg: DictConfig):
    """Flower's strategy from config (federate.strategy._target_), DP-wrapped on request."""
    import hydra

    f = cfg.federate
    strategy = hydra.utils.instantiate(
        f.strategy,
        fraction_train=f.fraction,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_evaluate_nodes=0,
        min_available_nodes=f.num_clients,
    )
    mods = []
    if f.compression != "none":
        from litlab.federated.compression import CompressionMod

        mods.append(CompressionMod(f.compression, f.topk_ratio))
    if f.dp.mode == "local":  # clipping and noise on each client
        from flwr.clientapp.mod import LocalDpMod

        mods.append(LocalDpMod(f.dp.clipping_norm, f.dp.clipping_norm, f.dp.epsilon, f.dp.delta))
    elif f.dp.mode == "central":  # clipping on each client, noise added by the server
        from flwr.clientapp.mod import fixedclipping_mod
        from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping

        sampled = max(1, int(f.num_clients * f.fraction))
        strategy = DifferentialPrivacyClientSideFixedClipping(
            strategy, f.dp.noise_multiplier, f.dp.clipping_norm, sampled
        )
        mods.append(fixedclipping_mod)
    return strategy, mods


def _simulate(server_app, client_app, f: DictConfig) -> None:
    from flwr.simulation import run_simulation

    backend = OmegaConf.to_container(f.backend, resolve=True)
    with no_orphans() as end:

        def interrupted(signum, frame) -> None:
            # Flower's runtime does not stop on KeyboardInterrupt (its worker threads go on
            # training, seen here): end the workers, then this process, at once
            print(
                "\ninterrupted: the simulation was stopped and its workers ended",
                file=sys.stderr,
                flush=True,
            )
            try:
                end(shutdown_ray=False)
                logging.shutdown()
                sys.stdout.flush()
            finally:  # whatever ending the workers raised: this process ends with 130
                os._exit(130)

        previous = signal.signal(signal.SIGINT, interrupted)
        try:
            run_simulation(
                server_app, client_app, num_supernodes=f.num_clients, backend_config=backend
            )
        finally:
            signal.signal(signal.SIGINT, previous)


def federate(cfg: DictConfig) -> dict[str, float]:
    """Run the federated simulation described by `cfg`; returns the final global metrics."""
    from litlab.config.validate import entry_config
    from litlab.federated.settings import FederateRun

    entry_config(cfg, FederateRun)  # one line, exit 2, before any data is read
    import json

    import lightning as L

    from litlab.config import build
    from litlab.federated import outputs, partition
    from litlab.federated.client import make_client_app
    from litlab.federated.server import CentralEvaluation, Recorded, make_server_app
    from litlab.recipes import report

    f, out = cfg.federate, Path(cfg.paths.output_dir)
    report.apply_extras(cfg)
    if not f.verbose:
        # Flower logs each failed client's traceback; litlab logs one line per failure
        logging.getLogger("flwr").setLevel(logging.CRITICAL)
        for name in ("alembic", "lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.WARNING)
    L.seed_everything(cfg.seed, workers=True)  # also seeds Flower's client sampling
    datamodule = build.datamodule(cfg)
    model = build.model(cfg, datamodule)  # data/model mismatch: one line, before any work
    datamodule.prepare_data()
    datamodule.setup("fit")
    labels = partition.labels_of(datamodule.train_set)
    parts = partition.partition(labels, f.num_clients, f.partition, f.alpha, f.seed)
    outputs.write_class_histogram(out, partition.class_counts(labels, parts))

    strategy, mods = _strategy(cfg)
    recorded = Recorded(strategy)

    def progress(rnd: int, metrics: dict) -> None:
        done = recorded.rounds[-1] if recorded.rounds and rnd > 0 else {}
        log.info(
            "round %d/%d  test/acc %.4f  clients %d ok, %d failed  sent %.2f MB",
            rnd,
            f.rounds,
            metrics.get("test/acc", float("nan")),
            done.get("clients", 0),
            done.get("failed", 0),
            done.get("bytes_sent", 0) / 1e6,
        )

    from litlab.checkpointing.run_config import RunConfigInCheckpoint

    config = OmegaConf.to_container(cfg, resolve=True)
    # the global checkpoint carries the run config, as train.py's do (eval.py, load_run, export)
    trainer = build.trainer(cfg, extra_callbacks=[RunConfigInCheckpoint(config)])
    evaluation = CentralEvaluation(model, datamodule, trainer, progress)
    client_app = make_client_app(config, [p.tolist() for p in parts], list(f.fail_clients), mods)
    server_app = make_server_app(recorded, evaluation, f.rounds)
    started = time.time()
    try:
        _simulate(server_app, client_app, f)
    finally:  # the rounds done so far, also when a round failed
        rows = outputs.history_rows(recorded.rounds, evaluation.results)
        if rows:
            outputs.write_history(out, rows)
    checkpoint = out / "global.ckpt"
    # not weights_only: that would skip the callbacks' save hook, which stores the run config
    # (this trainer only tested: the checkpoint holds no optimizer state either way)
    evaluation.trainer.save_checkpoint(checkpoint, weights_only=False)
    final = rows[-1]
    metrics = {
        "test/acc": final["accuracy"],
        "test/loss": final["loss"],
        "federate/bytes_per_round": sum(r["bytes_sent"] for r in rows) / f.rounds,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(outputs.summary(out, rows, checkpoint, time.time() - started), flush=True)
    return metrics
