"""Server side: Flower's strategy (FedAvg, FedProx, ... from config), wrapped to record each
round, decode compressed updates, and stop the run when no client of a round succeeded.

The wrapper delegates aggregation to the wrapped strategy unchanged (FedAvg's mean weighted by
each client's `num-examples`), in partition order (replies arrive in the order clients finish;
a float sum in another order differs in the last bits, and runs would not repeat). Which
clients train is chosen by `rounds.sample_clients` and handed to the strategy as a grid of
those nodes only. The global model is evaluated centrally (the test split, `CentralEvaluation`)
and by the round's clients on their held-out parts (`rounds.py`).
"""

import logging
import re
import time
from collections.abc import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
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
        self.arrays: ArrayRecord | None = None

    def initial_arrays(self) -> ArrayRecord:
        from litlab.federated.client import exchanged

        return ArrayRecord(exchanged(self.model))

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord:
        from litlab.federated.client import load_arrays

        load_arrays(self.model, arrays)
        self.arrays = arrays
        metrics = self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)[0]
        self.results[server_round] = {k: float(v) for k, v in metrics.items()}
        return MetricRecord(self.results[server_round])
