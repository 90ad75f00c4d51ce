"""The federated recipe behind `python src/federate.py`: check, partition, simulate, save.

Flower's simulation engine (Ray backend) runs the clients in worker processes; this process
runs the server (strategy, central evaluation) in a thread. Every round ends with the global
model and the history on disk (`state.py`), so a stop loses at most the round in progress,
and `ckpt_path=last|<run dir>` continues from there. `processes.py` makes sure that nothing
Ray started outlives the run, however it ends.

Client partitions are seeded and of dataset *items* (whole graphs, whole volumes): `iid` deals
a shuffled index evenly; `dirichlet` gives each class's samples to the clients in proportions
drawn from Dirichlet(alpha), the label skew of Hsu et al. (2019). (flwr-datasets has the same
partitioners, but only for Hugging Face datasets.)"""

import logging
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from litlab import tasks
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
    train_labels, heldout_labels = tasks.of(datamodule).federated_labels(datamodule)
    train, heldout = with_heldout(
        train_labels, heldout_labels, f.num_clients, f.partition, f.alpha, f.seed
    )
    counts = class_counts(train_labels, train)
    return {"train": [p.tolist() for p in train], "heldout": [p.tolist() for p in heldout]}, counts


def _data_and_model(cfg: DictConfig, f, ckpt, resumed):
    """(datamodule set up for fit, model, client partitions): a data/model mismatch, weights
    that do not fit, or partitions other than the resumed run's are one line, before any
    file is written."""
    import lightning as L

    from litlab.config import build
    from litlab.federated import state
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
    if resumed is not None and resumed["partitions"] != state.digest(parts):
        raise UserError(
            f"ckpt_path={cfg.ckpt_path}: the partitions differ from the run's "
            "(its data changed?); resuming would not continue the same run"
        )
    state.write_class_histogram(Path(cfg.paths.output_dir), counts)
    return datamodule, model, parts


class Federation:
    """One federated run: its server-side state (the strategy's record of rounds, the central
    and client evaluations), saved after every round and restored on a resume."""

    def __init__(self, cfg: DictConfig, f, ckpt, resumed) -> None:
        from litlab.checkpointing.run_config import RunConfigInCheckpoint
        from litlab.config import build
        from litlab.federated.server import CentralEvaluation, ClientEvaluation, Recorded
        from litlab.runs.summary import NAME, SplitFile

        self.cfg, self.f, self.resumed = cfg, f, resumed
        self.out = Path(cfg.paths.output_dir)
        if not f.verbose:  # Flower logs each failed client's traceback; litlab logs one line
            logging.getLogger("flwr").setLevel(logging.CRITICAL)
            for name in ("alembic", "lightning.pytorch", "lightning.fabric"):
                logging.getLogger(name).setLevel(logging.WARNING)
        datamodule, model, self.parts = _data_and_model(cfg, f, ckpt, resumed)
        self.config = OmegaConf.to_container(cfg, resolve=True)
        strategy, self.mods = strategy_of(cfg)
        self.recorded = Recorded(strategy)
        self.metric = str(cfg.model.monitor).split("/", 1)[-1]
        mode = str(cfg.model.monitor_mode)
        self.clients = ClientEvaluation(self.metric, mode) if f.client_eval else None
        # the global checkpoint carries the run config, as train.py's do (eval.py, load_run);
        # data_split.json names the items of each split (clients share the training items)
        callbacks = [RunConfigInCheckpoint(self.config), SplitFile(self.out / NAME)]
        self.trainer = build.trainer(cfg, extra_callbacks=callbacks)
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
        from litlab.federated import state

        clients = self.clients.results if self.clients else {}
        return state.history_rows(self.recorded.rounds, self.central.results, clients)

    def progress(self, rnd: int, metrics: dict) -> None:
        metric = self.metric
        done = self.recorded.rounds[-1] if self.recorded.rounds and rnd > 0 else {}
        mine = self.clients.results.get(rnd) if self.clients else None
        score = metrics.get(f"test/{metric}", float("nan"))
        clients = f"clients {done.get('clients', 0)} ok, {done.get('failed', 0)} failed"
        if mine:
            mean, worst = mine[f"client_{metric}_mean"], mine[f"client_{metric}_worst"]
            clients += f"  client {metric} mean {mean:.4f} worst {worst:.4f}"
        sent = f"sent {done.get('bytes_sent', 0) / 1e6:.2f} MB"
        log.info(f"round {rnd}/{self.f.rounds}  test/{metric} {score:.4f}  {clients}  {sent}")

    def on_round(self, rnd: int, arrays) -> None:
        """After each round: the history and the global model, atomically; a signal waits."""
        from litlab.federated import processes, state

        with processes.save_lock:
            state.write_history(self.out, self.rows(), self.metric)
            state.save(
                self.trainer,
                self.out,
                {
                    "round": rnd,
                    "rounds": self.recorded.rounds,
                    "central": self.central.results,
                    "clients": self.clients.results if self.clients else {},
                    "partitions": state.digest(self.parts),
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
        from litlab.checkpointing.resume_state import set_rng_state
        from litlab.federated import processes, state
        from litlab.federated.client import make_client_app
        from litlab.federated.server import run_rounds

        started, f, resumed = time.time(), self.f, self.resumed
        if self.start <= f.rounds:
            arrays = self.central.initial_arrays()  # the model as initialized, or as resumed
            before = (lambda: set_rng_state(resumed["rng"])) if resumed else None

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
        elapsed, checkpoint = time.time() - started, self.out / "global.ckpt"
        print(state.print_summary(self.out, history, checkpoint, elapsed, self.metric), flush=True)
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


# ---------------------------------------------------------------- recipe


def check_federated(cfg: DictConfig):
    """Every setting, before any data is read or Ray starts: one line on the first bad one.
    Returns the `federate.*` settings."""
    from litlab.config import validate

    _without_selection(cfg)
    # `federate.local_epochs=auto` resolved first: the data class's task kind
    return validate.check(cfg, "federate").federate


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


def _check_taken(cfg: DictConfig, resumed: dict):
    """The settings taken from the run, checked as this command's own (the command's were,
    before): a bad one is the file's, said so in one line."""
    try:
        f = check_federated(cfg)
    except UserError as err:
        raise UserError(f"ckpt_path={cfg.ckpt_path}: the run to resume has {err}") from None
    if resumed["round"] > f.rounds:
        raise UserError(
            f"ckpt_path={cfg.ckpt_path}: its round state (round {resumed['round']}) is past "
            f"the run's federate.rounds={f.rounds}"
        )
    return f


def federate(cfg: DictConfig, engine=None) -> dict[str, float]:
    """Run (or resume) the federated simulation described by `cfg`; returns the final metrics.

    `engine(server_main, client_app, num_clients, backend, stopped)` runs the rounds:
    `processes.simulate` (Flower's Ray simulation) unless a test passes an in-process one."""
    from litlab.checkpointing import resume
    from litlab.config import data_paths

    # last|<run dir> -> its checkpoints/last.ckpt; a requeued scheduler job: its own last.ckpt
    resume.resolve_checkpoint(cfg)
    typed = data_paths.absolute(cfg)  # as train.py stores them: absolute
    if typed:
        log.info("federate: data paths made absolute (as typed: %s)", typed)
    f = check_federated(cfg)
    ckpt, resumed = None, None
    if cfg.get("ckpt_path") is not None:
        from litlab.federated import state  # Lightning: after the settings are judged

        ckpt, resumed, taken = state.own_settings(cfg)
        if taken:
            log.info("federate: from the run to resume: %s", ", ".join(taken))
        f = _check_taken(cfg, resumed)
    return Federation(cfg, f, ckpt, resumed).run(engine)


# ------------------------------------------------------------- partition
#: Dirichlet draws that leave a client with fewer samples are drawn again (up to MAX_DRAWS)
MIN_SAMPLES = 2
MAX_DRAWS = 1000


def iid(num_samples: int, num_clients: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(num_samples)
    return [np.sort(part) for part in np.array_split(order, num_clients)]


def _split_by_shares(labels, num_clients: int, rng, share_of) -> list[np.ndarray]:
    """Each class's shuffled samples cut among the clients in the proportions
    `share_of(class)` gives (drawn after the class's shuffle: the order fixes the partition)."""
    parts = [[] for _ in range(num_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = (np.cumsum(share_of(int(c)))[:-1] * len(idx)).astype(int)
        for client, chunk in enumerate(np.split(idx, cuts)):
            parts[client].extend(chunk.tolist())
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def dirichlet_shares(labels: np.ndarray, num_clients: int, alpha: float, seed: int):
    """(parts, shares): the label-skewed partition, redrawn until every client holds at least
    MIN_SAMPLES, and each class's client shares that made it."""
    rng = np.random.default_rng(seed)
    need = min(MIN_SAMPLES, len(labels) // num_clients)
    for _ in range(MAX_DRAWS):
        shares = {}

        def draw(c: int, shares=shares):
            shares[c] = rng.dirichlet(np.full(num_clients, alpha))
            return shares[c]

        parts = _split_by_shares(labels, num_clients, rng, draw)
        if min(len(p) for p in parts) >= need:
            return parts, shares
    raise UserError(
        f"federate.alpha={alpha} leaves some of the {num_clients} clients with fewer "
        f"than {need} samples in {MAX_DRAWS} draws; use a larger alpha or fewer "
        "clients"
    )


def partition(
    labels: np.ndarray, num_clients: int, kind: str, alpha: float, seed: int
) -> list[np.ndarray]:
    """Index arrays into the training set, one per client (disjoint, together complete)."""
    return with_heldout(labels, np.zeros(0, np.int64), num_clients, kind, alpha, seed)[0]


def with_heldout(
    labels: np.ndarray, heldout: np.ndarray, num_clients: int, kind: str, alpha: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Training units partitioned as `partition` does, and held-out units dealt with the same
    per-class client shares (Dirichlet) or evenly (IID): each client's held-out part has its
    own label mix. A client may hold no held-out unit (it then does not evaluate)."""
    if num_clients > len(labels):
        raise UserError(
            f"federate.num_clients={num_clients} is more than the {len(labels)} training samples"
        )
    heldout = np.asarray(heldout)
    if kind == "iid":
        return iid(len(labels), num_clients, seed), iid(len(heldout), num_clients, seed + 1)
    parts, shares = dirichlet_shares(np.asarray(labels), num_clients, alpha, seed)
    even = np.full(num_clients, 1 / num_clients)
    held = _split_by_shares(
        heldout, num_clients, np.random.default_rng([seed, 1]), lambda c: shares.get(c, even)
    )
    return parts, held


def class_counts(labels: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """(clients, classes) sample counts: the per-client class histogram."""
    num_classes = int(labels.max()) + 1
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
