"""The server's round loop (the ServerApp's main): sample, train, aggregate, evaluate, save.

It is Flower's `Strategy.start` loop with what a resumable run needs:
- rounds can start at any round (a resumed run starts after the last saved one);
- the clients of round r are drawn from (seed, r) alone (`sample_clients`), in partition ids,
  so an interrupted and resumed run samples what an uninterrupted one does (Flower draws from
  random node ids, which differ between runs);
- after aggregation, the round's clients evaluate the new global model on their held-out
  parts (client-side evaluation), the server tests it centrally, and `on_round` saves it.
"""

import logging
import math
import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from litlab.federated.server import CentralEvaluation, Recorded

log = logging.getLogger(__name__)
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
                log.warning(
                    "round %d: a client's evaluation failed: %s",
                    server_round,
                    m.error.reason.splitlines()[0] if m.error.reason else "?",
                )
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
        chosen = [
            nodes[p]
            for p in sample_clients(settings.seed, rnd, settings.num_clients, settings.fraction)
        ]
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
