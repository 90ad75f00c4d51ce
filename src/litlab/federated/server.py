"""Server side: Flower's strategy (FedAvg, FedProx, ... from config), wrapped to record each
round, decode compressed updates, and stop the run when no client of a round succeeded; and
the round loop (the ServerApp's main): sample, train, aggregate, evaluate, save.

The wrapper delegates aggregation to the wrapped strategy unchanged, in partition order
(replies arrive in the order clients finish; a float sum in another order differs in the last
bits, and runs would not repeat). The loop is Flower's `Strategy.start` with what a resumable
run needs: it can start at any round, and the clients of round r are drawn from (seed, r)
alone (`sample_clients`), in partition ids, so a resumed run samples what an uninterrupted
one does (Flower draws from random node ids, which differ between runs). After aggregation
the round's clients evaluate the new global model on their held-out parts, the server tests
it centrally (`CentralEvaluation`), and `on_round` saves it."""

import logging
import math
import re
import time
from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from litlab.errors import UserError
from litlab.federated import compression

log = logging.getLogger(__name__)


class NoClientSucceeded(UserError):
    """A round whose sampled clients all failed: the run ends, exit code 1."""

    exit_code = 1


def _client_of(reason: str) -> str:
    found = re.search(r"client (\d+) failed: ([^\n'>]*)", reason)
    return f"{found.group(1)}: {found.group(2).strip()}" if found else reason.splitlines()[0]


def _partition_of(m: Message) -> tuple:
    if m.has_error():
        return (1, m.metadata.src_node_id)
    return (0, int(m.content["metrics"].get("partition-id", 0)))


class Recorded(Strategy):
    """Wraps a Flower strategy; `rounds` collects one dict per round."""

    def __init__(self, strategy: Strategy):
        self.strategy = strategy
        self.rounds: list[dict] = []
        self.global_arrays: ArrayRecord | None = None
        self._started = time.time()

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.global_arrays = arrays
        self._started = time.time()
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = sorted(replies, key=_partition_of)
        ok = [m for m in replies if not m.has_error()]
        failed = [_client_of(m.error.reason) for m in replies if m.has_error()]
        sent = sum(compression.count_bytes(m.content["arrays"]) for m in ok)
        dense = compression.count_bytes(self.global_arrays) * len(ok)
        for m in ok:  # full weights again, for any strategy and DP wrapper
            m.content["arrays"] = compression.decode_sent(m.content["arrays"], self.global_arrays)
        self.rounds.append(
            {
                "round": server_round,
                "clients": len(ok),
                "failed": len(failed),
                "failures": "; ".join(failed),
                "bytes_sent": sent,
                "bytes_uncompressed": dense,
                "train_s": round(time.time() - self._started, 2),
            }
        )
        for failure in failed:
            log.warning("round %d: client %s", server_round, failure)
        if not ok:
            raise NoClientSucceeded(
                f"round {server_round}: none of the {len(replies)} sampled "
                f"clients succeeded (client {failed[0] if failed else '?'})"
            )
        return self.strategy.aggregate_train(server_round, ok)

    def configure_evaluate(self, server_round, arrays, config, grid) -> Iterable[Message]:
        return []  # clients evaluate in rounds.py, on the round's clients

    def aggregate_evaluate(self, server_round, replies) -> MetricRecord | None:
        return None


class CentralEvaluation:
    """evaluate_fn of Flower's strategies: the global model on the central test split."""

    def __init__(self, model, datamodule, trainer):
        self.model, self.datamodule, self.trainer = model, datamodule, trainer
        self.results: dict[int, dict[str, float]] = {}

    def initial_arrays(self) -> ArrayRecord:
        from litlab.federated.client import exchanged

        return ArrayRecord(exchanged(self.model))

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord:
        from litlab.federated.client import load_arrays

        load_arrays(self.model, arrays)
        metrics = self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)[0]
        self.results[server_round] = {k: float(v) for k, v in metrics.items()}
        return MetricRecord(self.results[server_round])


# ---------------------------------------------------------------- rounds
TIMEOUT_S = 24 * 3600  # a round waits for its clients (the run's own limit is the user's)


def sample_clients(seed: int, server_round: int, num_clients: int, fraction: float) -> list[int]:
    """The partition ids that train in a round: a function of (seed, round) only."""
    k = max(1, int(num_clients * fraction))
    if k >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, server_round, 7])
    return sorted(rng.choice(num_clients, size=k, replace=False).tolist())


class _Nodes:
    """A Grid that shows the strategy only the nodes chosen for a round (it then samples all
    of them: fraction_train is 1 on the strategy)."""

    def __init__(self, grid, node_ids: list[int]):
        self._grid, self._ids = grid, node_ids

    def get_node_ids(self):
        return list(self._ids)

    def __getattr__(self, name):
        return getattr(self._grid, name)


class ClientEvaluation:
    """Aggregates the clients' own evaluation: weighted mean and worst client per round."""

    def __init__(self, metric: str, mode: str):
        self.metric, self.mode = metric, mode  # e.g. "acc", "max"
        self.results: dict[int, dict] = {}

    def aggregate(self, server_round: int, replies: list[Message]) -> None:
        rows = []
        for m in replies:
            if m.has_error():
                why = m.error.reason.splitlines()[0] if m.error.reason else "?"
                log.warning("round %d: a client's evaluation failed: %s", server_round, why)
                continue
            r = m.content["metrics"]
            if int(r["num-examples"]) > 0 and f"test/{self.metric}" in r:
                rows.append(r)
        if not rows:
            return
        n = np.asarray([float(r["num-examples"]) for r in rows])
        values = np.asarray([float(r[f"test/{self.metric}"]) for r in rows])
        losses = np.asarray([float(r.get("test/loss", math.nan)) for r in rows])
        worst = int(values.argmin() if self.mode == "max" else values.argmax())
        self.results[server_round] = {
            f"client_{self.metric}_mean": float((n * values).sum() / n.sum()),
            f"client_{self.metric}_worst": float(values[worst]),
            "client_worst_id": int(rows[worst]["partition-id"]),
            "client_loss_mean": float((n * losses).sum() / n.sum()),
            "client_eval_clients": len(rows),
            "client_eval_examples": int(n.sum()),
        }


def _send(grid, node_ids: list[int], kind: str, content: RecordDict) -> list[Message]:
    messages = [Message(content, message_type=kind, dst_node_id=n) for n in node_ids]
    return list(grid.send_and_receive(messages, timeout=TIMEOUT_S))


def partition_ids(grid, num_clients: int) -> dict[int, int]:
    """partition id -> node id, asked of every node (Flower draws node ids at random), once
    all of them are online (the simulation registers them while the server starts)."""
    while len(nodes := list(grid.get_node_ids())) < num_clients:
        time.sleep(0.5)
    replies = _send(grid, nodes, MessageType.QUERY, RecordDict())
    mapping = {}
    for m in replies:
        if m.has_error():
            raise RuntimeError(f"a client did not start: {m.error.reason.splitlines()[0]}")
        mapping[int(m.content["metrics"]["partition-id"])] = m.metadata.src_node_id
    if sorted(mapping) != list(range(num_clients)):
        raise RuntimeError(f"clients {sorted(mapping)} answered, not 0 to {num_clients - 1}")
    return mapping


def run_rounds(
    grid,
    strategy: Recorded,
    central: CentralEvaluation,
    clients: ClientEvaluation | None,
    settings,
    arrays: ArrayRecord,
    start: int,
    on_round,
    before_first=None,
) -> ArrayRecord:
    """Rounds `start`..settings.rounds; round 0 (the initial model) is tested when start is 1.
    `on_round(round, arrays)` saves a finished round; `before_first()` runs just before the
    first round trains (a resumed run restores its RNG states there)."""
    nodes = partition_ids(grid, settings.num_clients)
    if start == 1:
        central(0, arrays)
        on_round(0, arrays)
    for rnd in range(start, settings.rounds + 1):
        if rnd == start and before_first is not None:
            before_first()
        sampled = sample_clients(settings.seed, rnd, settings.num_clients, settings.fraction)
        chosen = [nodes[p] for p in sampled]
        messages = strategy.configure_train(rnd, arrays, ConfigRecord(), _Nodes(grid, chosen))
        replies = list(grid.send_and_receive(messages, timeout=TIMEOUT_S))
        aggregated, _ = strategy.aggregate_train(rnd, replies)
        if aggregated is not None:
            arrays = aggregated
        if clients is not None:
            ok = [m.metadata.src_node_id for m in replies if not m.has_error()]
            content = RecordDict({"arrays": arrays, "config": ConfigRecord({"server-round": rnd})})
            clients.aggregate(rnd, _send(grid, sorted(ok), MessageType.EVALUATE, content))
        central(rnd, arrays)
        on_round(rnd, arrays)
    return arrays
