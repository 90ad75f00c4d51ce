"""The federated recipe behind `python src/federate.py`: check, partition, simulate, save.

Flower's simulation engine (Ray backend) runs the clients in worker processes; this process
runs the server (strategy, central evaluation) in a thread. Every round ends with the global
model and the history on disk (`state.py`), so a stop loses at most the round in progress,
and `ckpt_path=last|<run dir>` continues from there. `processes.py` makes sure that nothing
Ray started outlives the run, however it ends.
"""

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.errors import UserError

log = logging.getLogger(__name__)


def check(cfg: DictConfig):
    """Every setting, before any data is read or Ray starts: one line on the first bad one."""
    from litlab.config import federate_settings as settings
    from litlab.config import validate

    settings.check(OmegaConf.to_container(cfg.federate, resolve=True))  # no import: at once
    _without_selection(cfg)
    settings.resolve_auto(cfg)  # the data class's task kind (its source, or an import)
    f = settings.check(OmegaConf.to_container(cfg.federate, resolve=True))
    validate.federate_config(cfg)
    return f


def _without_selection(cfg: DictConfig) -> None:
    """Callbacks that select or stop on validation metrics (`monitor`/`monitors`: checkpoints,
    early stopping) are left out: clients run no validation (the server tests the global model
    each round) and the run keeps its global model itself. An experiment made for train.py
    brings them (`experiment=gat_cora`: the paper's joint selection); said in the log file."""
    from omegaconf import open_dict

    callbacks = cfg.get("callbacks")
    if not callbacks:
        return
    dropped = [
        name
        for name, node in callbacks.items()
        if node is not None and ("monitor" in node or "monitors" in node)
    ]
    with open_dict(cfg):
        for name in dropped:
            del cfg.callbacks[name]
    if dropped:
        log.info("federate: callbacks %s left out (clients do not validate)", ", ".join(dropped))


def _own_settings(cfg: DictConfig) -> tuple[dict, dict]:
    """A resume continues the run as it was started (`python src/federate.py ckpt_path=<run
    dir>`, as printed on a stop): its checkpoint and round state, checked as data, and its
    settings taken into `cfg` where this command does not set them (`state.own_settings`)."""
    from litlab.checkpointing import links
    from litlab.federated import state

    path = Path(cfg.ckpt_path)
    links.check_links(Path(cfg.paths.output_dir))  # it writes there: no way out
    ckpt, resumed = state.load(path)
    taken = state.own_settings(cfg, ckpt, str(path), path.parents[1])
    if taken:
        log.info("federate: from the run to resume: %s", ", ".join(taken))
    return ckpt, resumed


def _check_taken(cfg: DictConfig, resumed: dict):
    """The settings taken from the run, checked as this command's own (the command's were,
    before): a bad one is the file's, said so in one line."""
    try:
        f = check(cfg)
    except UserError as err:
        raise UserError(f"ckpt_path={cfg.ckpt_path}: the run to resume has {err}") from None
    if resumed["round"] > f.rounds:
        raise UserError(
            f"ckpt_path={cfg.ckpt_path}: its round state (round {resumed['round']}) is past "
            f"the run's federate.rounds={f.rounds}"
        )
    return f


def _strategy(cfg: DictConfig):
    """Flower's strategy from config (federate.strategy._target_), DP-wrapped on request. It
    trains every node it is shown: rounds.py shows it the round's sampled clients."""
    import hydra

    f = cfg.federate
    strategy = hydra.utils.instantiate(
        f.strategy,
        fraction_train=1.0,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_evaluate_nodes=0,
        min_available_nodes=1,
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


def _partitions(datamodule, f) -> dict:
    from litlab.federated import partition, views

    train_labels, heldout_labels = views.unit_labels(datamodule)
    train, heldout = partition.with_heldout(
        train_labels, heldout_labels, f.num_clients, f.partition, f.alpha, f.seed
    )
    counts = partition.class_counts(train_labels, train)
    return {"train": [p.tolist() for p in train], "heldout": [p.tolist() for p in heldout]}, counts


def federate(cfg: DictConfig, engine=None) -> dict[str, float]:
    """Run (or resume) the federated simulation described by `cfg`; returns the final metrics.

    `engine(server_main, client_app, num_clients, backend, stopped)` runs the rounds:
    `processes.simulate` (Flower's Ray simulation) unless a test passes an in-process one."""
    from litlab.checkpointing import resume
    from litlab.config import federate_settings as settings

    settings.check(OmegaConf.to_container(cfg.federate, resolve=True))  # at once: no import
    # last|<run dir> -> its checkpoints/last.ckpt; a requeued scheduler job: its own last.ckpt
    resume.resolve_checkpoint(cfg)
    f = check(cfg)
    ckpt, resumed = (None, None) if cfg.get("ckpt_path") is None else _own_settings(cfg)
    if resumed is not None:
        f = _check_taken(cfg, resumed)
    import json

    import lightning as L

    from litlab.checkpointing.run_config import RunConfigInCheckpoint
    from litlab.config import build
    from litlab.federated import outputs, processes, state
    from litlab.federated.client import make_client_app
    from litlab.federated.rounds import ClientEvaluation, run_rounds
    from litlab.federated.server import CentralEvaluation, Recorded
    from litlab.recipes import report

    out = Path(cfg.paths.output_dir)
    if not f.verbose:
        # Flower logs each failed client's traceback; litlab logs one line per failure
        logging.getLogger("flwr").setLevel(logging.CRITICAL)
        for name in ("alembic", "lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.WARNING)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build.datamodule(cfg)
    model = build.model(cfg, datamodule)  # data/model mismatch: one line, before any work
    if resumed is not None:  # weights that do not fit: one line, before anything is written
        state.load_weights(model, ckpt, cfg.ckpt_path)
    report.apply_extras(cfg)
    datamodule.prepare_data()
    if hasattr(datamodule, "setup"):
        datamodule.setup("fit")
    parts, counts = _partitions(datamodule, f)
    if resumed is not None and resumed["partitions"] != state.digest(
        parts["train"] + parts["heldout"]
    ):
        raise UserError(
            f"ckpt_path={cfg.ckpt_path}: the partitions differ from the run's "
            "(its data changed?); resuming would not continue the same run"
        )
    outputs.write_class_histogram(out, counts)

    config = OmegaConf.to_container(cfg, resolve=True)
    strategy, mods = _strategy(cfg)
    recorded = Recorded(strategy)
    metric, mode = str(cfg.model.monitor).split("/", 1)[-1], str(cfg.model.monitor_mode)
    clients = ClientEvaluation(metric, mode) if f.client_eval else None
    start, saved = 1, None
    if resumed is not None:
        if f.compression == "topk":
            log.warning(
                "compression=topk: the clients' unsent residuals were in the stopped run's "
                "memory; they restart at zero (this run is not bit-identical to one that never "
                "stopped)"
            )
        recorded.rounds = list(resumed["rounds"])
        start = saved = int(resumed["round"])
        start += 1

    def progress(rnd: int, metrics: dict) -> None:
        done = recorded.rounds[-1] if recorded.rounds and rnd > 0 else {}
        mine = clients.results.get(rnd, {}) if clients else {}
        log.info(
            "round %d/%d  test/%s %.4f  clients %d ok, %d failed%s  sent %.2f MB",
            rnd,
            f.rounds,
            metric,
            metrics.get(f"test/{metric}", float("nan")),
            done.get("clients", 0),
            done.get("failed", 0),
            (
                f"  client {metric} mean {mine[f'client_{metric}_mean']:.4f} worst "
                f"{mine[f'client_{metric}_worst']:.4f}"
                if mine
                else ""
            ),
            done.get("bytes_sent", 0) / 1e6,
        )

    # the global checkpoint carries the run config, as train.py's do (eval.py, load_run, export)
    trainer = build.trainer(cfg, extra_callbacks=[RunConfigInCheckpoint(config)])
    central = CentralEvaluation(model, datamodule, trainer)
    if resumed is not None:
        central.results = {int(k): v for k, v in resumed["central"].items()}
        if clients is not None:
            clients.results = {int(k): v for k, v in resumed.get("clients", {}).items()}
    last = {"round": saved}

    def rows() -> list[dict]:
        return outputs.history_rows(
            recorded.rounds, central.results, clients.results if clients else {}
        )

    def on_round(rnd: int, arrays) -> None:
        """After each round: the history and the global model, atomically; a signal waits."""
        with processes.save_lock:
            outputs.write_history(out, rows(), metric)
            state.save(
                trainer,
                out,
                {
                    "round": rnd,
                    "rounds": recorded.rounds,
                    "central": central.results,
                    "clients": clients.results if clients else {},
                    "partitions": state.digest(parts["train"] + parts["heldout"]),
                    "rng": state.rng_state(),
                },
            )
            last["round"] = rnd
        # printed once the round is on disk: a stop after "round r/N" resumes after round r
        progress(rnd, central.results.get(rnd, {}))

    def stopped(signame: str) -> str:
        done = last["round"]
        if done is None:
            return f"interrupted ({signame}) before round 1 ended: nothing to resume"
        return (
            f"interrupted ({signame}): rounds up to {done} of {f.rounds} are saved in {out}; "
            f"resume with: {state.resume_command(out)}"
        )

    started = time.time()
    if start <= f.rounds:
        arrays = central.initial_arrays()  # the model as initialized, or as resumed
        before = (lambda: state.set_rng_state(resumed["rng"])) if resumed else None

        def server_main(grid) -> None:
            run_rounds(grid, recorded, central, clients, f, arrays, start, on_round, before)

        client_app = make_client_app(config, parts, list(f.fail_clients), mods)
        backend = OmegaConf.to_container(cfg.federate.backend, resolve=True)
        (engine or processes.simulate)(server_main, client_app, f.num_clients, backend, stopped)
    else:
        log.info("all %d rounds of %s are done: nothing to resume", f.rounds, out)
    history = rows()
    final = history[-1]
    metrics = {
        k: v for k, v in central.results.get(final["round"], {}).items() if k.startswith("test/")
    }
    metrics["federate/bytes_per_round"] = sum(r["bytes_sent"] for r in history) / f.rounds
    if clients is not None and final["round"] in clients.results:
        metrics.update({f"federate/{k}": v for k, v in clients.results[final["round"]].items()})
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    checkpoint = out / "global.ckpt"
    print(outputs.summary(out, history, checkpoint, time.time() - started, metric), flush=True)
    return metrics
