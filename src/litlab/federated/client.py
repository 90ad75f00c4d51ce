"""The Flower ClientApp: one client trains litlab's own LightningModule on its partition.

Each Ray worker builds the datamodule once (cached per process); for every message it builds
the model from the run config, loads the global weights and fits a Trainer built as train.py's
for `local_epochs` on the client's partition only. FedProx's proximal term enters as a
gradient callback, so any LitModule trains under it unchanged."""

import logging
import math
from functools import partial

import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf

from litlab import tasks
from litlab.config import build
from litlab.errors import one_line

_DATAMODULES: dict[str, tuple] = {}  # per worker process: run dir -> (datamodule, its full sets)


class ProximalTerm(Callback):
    """FedProx: adds the gradient of (mu / 2) * ||w - w_global||^2 after every backward pass."""

    def __init__(self, mu: float, global_params: dict[str, torch.Tensor]):
        self.mu, self.global_params = mu, global_params

    def on_after_backward(self, trainer, pl_module) -> None:
        for name, p in pl_module.named_parameters():
            if p.grad is not None and name in self.global_params:
                p.grad.add_(p.detach() - self.global_params[name], alpha=self.mu)


def exchanged(model) -> dict[str, torch.Tensor]:
    """The state a client and the server exchange: floating-point entries (weights and
    normalization statistics); integer counters such as BatchNorm's stay local."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items() if v.is_floating_point()}


def load_arrays(model, arrays: ArrayRecord) -> None:
    model.load_state_dict(arrays.to_torch_state_dict(), strict=False)


def _datamodule(cfg):
    """The worker's datamodule (built once per process and run) and its own full sets."""
    key = cfg.paths.output_dir
    if key not in _DATAMODULES:
        datamodule = build.datamodule(cfg)
        datamodule.prepare_data()
        datamodule.setup("fit")
        _DATAMODULES[key] = (datamodule, tasks.of(datamodule).units.originals(datamodule))
    return _DATAMODULES[key]


def _client(config: dict, parts: dict, msg: Message, partition_id: int):
    """(cfg, datamodule narrowed to the client, model with the global weights, round)."""
    import lightning as L

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    cfg = OmegaConf.create(config)
    round_ = int(msg.content["config"]["server-round"])
    # every (round, client) has its own seed: whichever worker runs it, and in a resumed run
    L.seed_everything(cfg.seed + 1000 * round_ + partition_id, workers=True, verbose=False)
    datamodule, full = _datamodule(cfg)
    units = tasks.of(datamodule).units  # a client's own copy, narrowed to its units
    units.narrow(datamodule, full, parts["train"][partition_id], parts["heldout"][partition_id])
    return cfg, datamodule, round_


def train_client(config: dict, parts: dict, fail: list, msg: Message, partition_id: int):
    """Train on partition `partition_id`; returns the reply's RecordDict."""
    cfg, datamodule, round_ = _client(config, parts, msg, partition_id)
    if partition_id in fail:  # fault injection (federate.fail_clients): tests and demos
        raise RuntimeError("injected failure (federate.fail_clients)")
    if cfg.federate.lr_decay == "cosine" and "lr" in cfg.model.optimizer:  # across rounds
        cfg.model.optimizer.lr *= 0.5 * (1 + math.cos(math.pi * (round_ - 1) / cfg.federate.rounds))
    model = build.model(cfg, datamodule)
    load_arrays(model, msg.content["arrays"])
    mu = float(msg.content["config"].get("proximal-mu", 0.0))
    extra = []
    if mu > 0:  # FedProx: the global weights this round started from
        extra.append(ProximalTerm(mu, {k: p.detach().clone() for k, p in model.named_parameters()}))
    trainer = build.trainer(cfg, extra_callbacks=extra)
    trainer.fit(model, datamodule=datamodule)
    loss = trainer.callback_metrics.get("train/loss")
    trained = tasks.of(datamodule).units.train_count(datamodule)
    metrics = {"num-examples": trained, "partition-id": partition_id}
    if loss is not None:
        metrics["train-loss"] = float(loss)
    return RecordDict({"arrays": ArrayRecord(exchanged(model)), "metrics": MetricRecord(metrics)})


def evaluate_client(config: dict, parts: dict, msg: Message, partition_id: int):
    """The global model on the client's held-out part (trainer.test: the model's own metrics)."""
    cfg, datamodule, _ = _client(config, parts, msg, partition_id)
    heldout = tasks.of(datamodule).units.heldout_count(datamodule)
    metrics = {"num-examples": heldout, "partition-id": partition_id}
    if metrics["num-examples"] > 0:
        model = build.model(cfg, datamodule)
        load_arrays(model, msg.content["arrays"])
        trainer = build.trainer(cfg)
        result = trainer.test(model, datamodule=datamodule, verbose=False)[0]
        metrics.update({k: float(v) for k, v in result.items()})
    return RecordDict({"metrics": MetricRecord(metrics)})


def _reply(work, msg: Message, context) -> Message:
    """`work(msg, partition_id)`'s content as the reply to `msg`."""
    partition_id = int(context.node_config["partition-id"])
    try:
        content = work(msg, partition_id)
    except Exception as err:  # the server records which client failed, and why
        raise RuntimeError(f"client {partition_id} failed: {one_line(err)}") from err
    return Message(content, reply_to=msg)


def make_client_app(config: dict, parts: dict, fail: list, mods: list) -> ClientApp:
    """A ClientApp over the resolved run config (plain dicts: it travels to Ray workers);
    `parts` = {"train": [[unit ids] per client], "heldout": [[unit ids] per client]}."""
    app = ClientApp(mods=mods)

    @app.train()
    def train(msg: Message, context) -> Message:
        return _reply(partial(train_client, config, parts, fail), msg, context)

    @app.evaluate()
    def evaluate(msg: Message, context) -> Message:
        return _reply(partial(evaluate_client, config, parts), msg, context)

    @app.query()
    def query(msg: Message, context) -> Message:
        partition_id = int(context.node_config["partition-id"])
        return Message(
            RecordDict({"metrics": MetricRecord({"partition-id": partition_id})}), reply_to=msg
        )

    return app
