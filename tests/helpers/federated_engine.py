"""An in-process engine for `litlab.federated.federation.federate(cfg, engine=...)`: the same
server loop and ClientApp as the Ray simulation, with the clients called one after another
in this process (no Ray start: seconds instead of a minute on a busy 2-core machine).

`stop_in_round=r` raises `Stopped` when round r's training is sent: a run killed mid-round
(`printed` then gets the line a SIGTERM there prints: `... resume with: <command>`)."""

from flwr.app import Context, Error, Message, RecordDict

from litlab.errors import one_line


class Stopped(Exception):
    pass


class InProcessGrid:
    def __init__(self, client_app, num_clients: int, stop_in_round: int | None = None):
        self.app, self.stop_in_round = client_app, stop_in_round
        # node ids unlike partition ids, as Flower's are
        self.partition_of = {1000 + 7 * p: p for p in range(num_clients)}
        self.contexts = {
            n: Context(
                run_id=1,
                node_id=n,
                node_config={"partition-id": p},
                state=RecordDict(),
                run_config={},
            )
            for n, p in self.partition_of.items()
        }

    def get_node_ids(self):
        return list(self.partition_of)[::-1]

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for msg in messages:
            if msg.metadata.message_type == "train":
                rnd = int(msg.content["config"]["server-round"])
                if rnd == self.stop_in_round:
                    raise Stopped(f"stopped in round {rnd}")
            try:
                reply = self.app(msg, self.contexts[msg.metadata.dst_node_id])
            except Exception as err:  # noqa: BLE001  (as Flower's runtime: an error reply)
                reply = Message(
                    Error(code=0, reason=f"ClientAppException: {one_line(err)}"), reply_to=msg
                )
            replies.append(reply)
        return replies


def engine(stop_in_round: int | None = None, printed: list | None = None):
    """`printed`: gets the line the run prints when a SIGTERM stops it (`stopped("SIGTERM")`,
    as the Ray engine prints it), when `stop_in_round` stops it."""

    def run(server_main, client_app, num_clients, backend, stopped) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0
        try:
            server_main(InProcessGrid(client_app, num_clients, stop_in_round))
        except Stopped:
            if printed is not None:
                printed.append(stopped("SIGTERM"))
            raise

    return run
