"""One federated run's server side (`federate.py`'s recipe builds it once its settings are
checked): the Flower strategy and client mods its settings name, the data dealt to clients,
and the state every round saves and a resume restores (the strategy's record of rounds, the
central and client evaluations)."""

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.errors import UserError

log = logging.getLogger(__name__)


def strategy_of(cfg: DictConfig):
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


def partitions_of(datamodule, f) -> tuple[dict, dict]:
    from litlab import tasks
    from litlab.federated import partition

    train_labels, heldout_labels = tasks.of(datamodule).federated_labels(datamodule)
    train, heldout = partition.with_heldout(
        train_labels, heldout_labels, f.num_clients, f.partition, f.alpha, f.seed
    )
    counts = partition.class_counts(train_labels, train)
    return {"train": [p.tolist() for p in train], "heldout": [p.tolist() for p in heldout]}, counts


def _quiet_libraries(verbose: bool) -> None:
    if not verbose:
        # Flower logs each failed client's traceback; litlab logs one line per failure
        logging.getLogger("flwr").setLevel(logging.CRITICAL)
        for name in ("alembic", "lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.WARNING)


def _data_and_model(cfg: DictConfig, f, ckpt, resumed):
    """(datamodule set up for fit, model, client partitions): a data/model mismatch, weights
    that do not fit, or partitions other than the resumed run's are one line, before any
    file is written."""
    import lightning as L

    from litlab.config import build
    from litlab.federated import outputs, state
    from litlab.runs import summary as report

    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build.datamodule(cfg)
    model = build.model(cfg, datamodule)
    if resumed is not None:
        state.load_weights(model, ckpt, cfg.ckpt_path)
    report.apply_extras(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    parts, counts = partitions_of(datamodule, f)
    if resumed is not None and resumed["partitions"] != state.digest(
        parts["train"] + parts["heldout"]
    ):
        raise UserError(
            f"ckpt_path={cfg.ckpt_path}: the partitions differ from the run's "
            "(its data changed?); resuming would not continue the same run"
        )
    outputs.write_class_histogram(Path(cfg.paths.output_dir), counts)
    return datamodule, model, parts


class Federation:
    """One federated run: its server-side state (the strategy's record of rounds, the central
    and client evaluations), saved after every round and restored on a resume."""

    def __init__(self, cfg: DictConfig, f, ckpt, resumed) -> None:
        from litlab.checkpointing.run_config import RunConfigInCheckpoint
        from litlab.config import build
        from litlab.federated.server import CentralEvaluation, ClientEvaluation, Recorded
        from litlab.runs.predictions import NAME, SplitFile

        self.cfg, self.f, self.resumed = cfg, f, resumed
        self.out = Path(cfg.paths.output_dir)
        _quiet_libraries(f.verbose)
        datamodule, model, self.parts = _data_and_model(cfg, f, ckpt, resumed)
        self.config = OmegaConf.to_container(cfg, resolve=True)
        strategy, self.mods = strategy_of(cfg)
        self.recorded = Recorded(strategy)
        self.metric = str(cfg.model.monitor).split("/", 1)[-1]
        mode = str(cfg.model.monitor_mode)
        self.clients = ClientEvaluation(self.metric, mode) if f.client_eval else None
        # the global checkpoint carries the run config, as train.py's do (eval.py, load_run);
        # data_split.json names the items of each split (clients share the training items)
        split = SplitFile(self.out / NAME)
        self.trainer = build.trainer(
            cfg, extra_callbacks=[RunConfigInCheckpoint(self.config), split]
        )
        self.central = CentralEvaluation(model, datamodule, self.trainer)
        self.start, self.saved = 1, None  # the first round to run; the last one on disk
        if resumed is not None:
            self._restore(resumed)

    def _restore(self, resumed: dict) -> None:
        if self.f.compression == "topk":
            log.warning(
                "compression=topk: the clients' unsent residuals were in the stopped run's "
                "memory; they restart at zero (this run is not bit-identical to one that never "
                "stopped)"
            )
        self.recorded.rounds = list(resumed["rounds"])
        self.saved = int(resumed["round"])
        self.start = self.saved + 1
        self.central.results = {int(k): v for k, v in resumed["central"].items()}
        if self.clients is not None:
            self.clients.results = {int(k): v for k, v in resumed.get("clients", {}).items()}

    def rows(self) -> list[dict]:
        from litlab.federated import outputs

        clients = self.clients.results if self.clients else {}
        return outputs.history_rows(self.recorded.rounds, self.central.results, clients)

    def progress(self, rnd: int, metrics: dict) -> None:
        metric = self.metric
        done = self.recorded.rounds[-1] if self.recorded.rounds and rnd > 0 else {}
        mine = self.clients.results.get(rnd, {}) if self.clients else {}
        log.info(
            "round %d/%d  test/%s %.4f  clients %d ok, %d failed%s  sent %.2f MB",
            rnd,
            self.f.rounds,
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

    def on_round(self, rnd: int, arrays) -> None:
        """After each round: the history and the global model, atomically; a signal waits."""
        from litlab.federated import outputs, processes, state

        with processes.save_lock:
            outputs.write_history(self.out, self.rows(), self.metric)
            state.save(
                self.trainer,
                self.out,
                {
                    "round": rnd,
                    "rounds": self.recorded.rounds,
                    "central": self.central.results,
                    "clients": self.clients.results if self.clients else {},
                    "partitions": state.digest(self.parts["train"] + self.parts["heldout"]),
                    "rng": state.global_rng_state(),
                },
            )
            self.saved = rnd
        # printed once the round is on disk: a stop after "round r/N" resumes after round r
        self.progress(rnd, self.central.results.get(rnd, {}))

    def stopped(self, signame: str) -> str:
        from litlab.federated import state

        if self.saved is None:
            return f"interrupted ({signame}) before round 1 ended: nothing to resume"
        return (
            f"interrupted ({signame}): rounds up to {self.saved} of {self.f.rounds} are saved "
            f"in {self.out}; resume with: {state.federated_resume_command(self.out)}"
        )

    def run(self, engine) -> dict[str, float]:
        """The rounds still to run, then the final metrics (metrics.json) and the summary."""
        from litlab.federated import outputs, processes, state
        from litlab.federated.client import make_client_app
        from litlab.federated.server import run_rounds

        started, f, resumed = time.time(), self.f, self.resumed
        if self.start <= f.rounds:
            arrays = self.central.initial_arrays()  # the model as initialized, or as resumed
            before = (lambda: state.set_global_rng_state(resumed["rng"])) if resumed else None

            def server_main(grid) -> None:
                run_rounds(
                    grid, self.recorded, self.central, self.clients, f, arrays, self.start,
                    self.on_round, before,
                )  # fmt: skip

            client_app = make_client_app(self.config, self.parts, list(f.fail_clients), self.mods)
            backend = OmegaConf.to_container(self.cfg.federate.backend, resolve=True)
            (engine or processes.simulate)(
                server_main, client_app, f.num_clients, backend, self.stopped
            )
        else:
            log.info("all %d rounds of %s are done: nothing to resume", f.rounds, self.out)
        history = self.rows()
        metrics = self._final_metrics(history)
        elapsed = time.time() - started
        checkpoint = self.out / "global.ckpt"
        print(
            outputs.print_summary(self.out, history, checkpoint, elapsed, self.metric), flush=True
        )
        return metrics

    def _final_metrics(self, history: list[dict]) -> dict[str, float]:
        import json

        final = history[-1]["round"]
        results = self.central.results.get(final, {})
        metrics = {k: v for k, v in results.items() if k.startswith("test/")}
        metrics["federate/bytes_per_round"] = sum(r["bytes_sent"] for r in history) / self.f.rounds
        if self.clients is not None and final in self.clients.results:
            metrics.update({f"federate/{k}": v for k, v in self.clients.results[final].items()})
        (self.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        return metrics
