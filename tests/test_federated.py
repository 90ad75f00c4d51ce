"""Federated learning (litlab.federated, src/federate.py): partitions, FedAvg aggregation,
compressed updates, FedProx, client rounds, faults. Ray runs are slow (marked); the default
suite drives the same client and server code in-process."""

import os
import re
import subprocess
import sys
import uuid

import numpy as np
import pytest
import torch
from helpers.runs import ROOT

import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)
from litlab.config.compose import compose

# isort: split
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity

from litlab.errors import UserError
from litlab.federated import compression, partition
from litlab.federated.server import NoClientSucceeded, Recorded


@pytest.fixture(autouse=True)
def _flower_identity():
    """Messages built outside a Flower run need a run/task identity."""
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0


def _train_message(arrays: ArrayRecord, rnd: int = 1) -> Message:
    return Message(
        RecordDict({"arrays": arrays, "config": ConfigRecord({"server-round": rnd})}),
        dst_node_id=7,
        message_type="train",
    )


def _reply(to: Message, arrays: ArrayRecord, n: int) -> Message:
    return Message(
        RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": n})}), reply_to=to
    )


# --- partitions ---------------------------------------------------------------------------
def _check_partition(parts, n):
    everything = np.concatenate(parts)
    assert len(everything) == n and len(np.unique(everything)) == n  # disjoint and complete
    assert sorted(everything.tolist()) == list(range(n))


@pytest.mark.parametrize("kind", ["iid", "dirichlet"])
def test_partitions_seeded_disjoint_complete(kind):
    labels = np.random.default_rng(0).integers(0, 10, 1293)
    parts = partition.partition(labels, 10, kind, alpha=0.5, seed=3)
    _check_partition(parts, len(labels))
    again = partition.partition(labels, 10, kind, alpha=0.5, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition.partition(labels, 10, kind, alpha=0.5, seed=4)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))
    assert min(len(p) for p in parts) >= partition.MIN_SAMPLES


def test_dirichlet_skew_follows_alpha():
    """Small alpha: each client is dominated by few classes; large alpha: close to IID."""
    labels = np.repeat(np.arange(10), 130)

    def classes_per_client(alpha):  # classes with at least 5 samples, mean over clients
        counts = partition.class_counts(labels, partition.dirichlet(labels, 10, alpha, seed=0))
        return float(np.mean((counts >= 5).sum(1)))

    assert classes_per_client(0.1) < 5 < classes_per_client(1.0) < classes_per_client(100) == 10


def test_partition_items_of_each_domain(shared_data):
    """Digits images, phantom volumes and whole MUTAG graphs: labels read, items partitioned."""
    from litlab.data.medical3d import PhantomClassificationDataModule
    from litlab.data.tudataset import TUDataModule
    from litlab.data.vision import DigitsDataModule

    phantoms = PhantomClassificationDataModule(num_volumes=24, size=12, size_jitter=0)
    mutag = TUDataModule(name="MUTAG", data_dir=str(shared_data("TUDataset/MUTAG").parents[1]))
    for dm in (DigitsDataModule(), phantoms, mutag):
        dm.setup("fit")
        labels = partition.labels_of(dm.train_set)
        truth = [
            int(item[1]) if isinstance(item, (tuple, list)) else int(item.y)
            for item in dm.train_set
        ]
        assert labels.tolist() == truth
        parts = partition.partition(labels, 4, "dirichlet", alpha=1.0, seed=0)
        _check_partition(parts, len(dm.train_set))


def test_too_many_clients_is_one_line():
    with pytest.raises(UserError, match="more than the 5 training samples"):
        partition.partition(np.zeros(5, int), 6, "iid", 1.0, 0)


# --- aggregation and compression ------------------------------------------------------------
def test_fedavg_aggregation_is_the_sample_weighted_mean_exactly():
    """Through litlab's wrapper: Flower's FedAvg weights each client by its sample count."""
    glob = ArrayRecord(
        {"w": Array(np.zeros((2, 2), np.float32)), "b": Array(np.zeros(3, np.float32))}
    )
    a = {
        "w": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
        "b": np.array([0.5, -1.0, 8.0], np.float32),
    }
    b = {
        "w": np.array([[5.0, 6.0], [7.0, 8.0]], np.float32),
        "b": np.array([1.5, 3.0, 0.0], np.float32),
    }
    strategy = Recorded(FedAvg())
    strategy.global_arrays = glob
    msg = _train_message(glob)
    replies = [
        _reply(msg, ArrayRecord({k: Array(v) for k, v in a.items()}), 10),
        _reply(msg, ArrayRecord({k: Array(v) for k, v in b.items()}), 30),
    ]
    arrays, _ = strategy.aggregate_train(1, replies)
    for key in ("w", "b"):
        expected = (10 * a[key] + 30 * b[key]) / 40  # hand-computed weighted mean
        np.testing.assert_array_equal(arrays[key].numpy(), expected)
    row = strategy.rounds[0]
    assert (row["clients"], row["failed"]) == (2, 0)
    assert row["bytes_sent"] == row["bytes_uncompressed"] == 2 * compression.count_bytes(glob)


def test_failed_clients_are_recorded_and_a_round_without_success_stops():
    glob = ArrayRecord({"w": Array(np.zeros(4, np.float32))})
    strategy = Recorded(FedAvg())
    strategy.global_arrays = glob
    msg = _train_message(glob)
    failure = Message(
        Error(code=0, reason="ClientAppException: client 3 failed: boom"), reply_to=msg
    )
    arrays, _ = strategy.aggregate_train(
        1, [_reply(msg, ArrayRecord({"w": Array(np.ones(4, np.float32))}), 5), failure]
    )
    np.testing.assert_array_equal(arrays["w"].numpy(), np.ones(4))
    assert strategy.rounds[0]["failed"] == 1 and strategy.rounds[0]["failures"] == "3: boom"
    with pytest.raises(NoClientSucceeded, match="round 2: none of the 1 sampled clients succeeded"):
        strategy.aggregate_train(2, [failure])
    assert NoClientSucceeded.exit_code == 1


def _model_like_record(seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"conv.weight": (64, 32, 3, 3), "conv.bias": (64,), "fc.weight": (10, 256)}
    return ArrayRecord({k: Array(rng.normal(size=s).astype(np.float32)) for k, s in shapes.items()})


@pytest.mark.parametrize("kind,max_share", [("int8", 0.26), ("topk", 0.31)])
def test_compressed_updates_send_60_percent_fewer_bytes(kind, max_share):
    glob, local = _model_like_record(0), _model_like_record(1)
    update = compression.flat(local) - compression.flat(glob)
    sent, left = compression.encode(update, compression.sizes(glob), kind, topk_ratio=0.2)
    share = compression.count_bytes(sent) / compression.count_bytes(local)
    assert share <= max_share  # int8: 1 byte of 4; top-20%: (4 + 2 bytes) for 1 entry of 5
    decoded = compression.decode(sent, glob)
    assert list(decoded.keys()) == list(glob.keys())
    error = compression.flat(decoded) - compression.flat(local)
    np.testing.assert_allclose(error, -left, atol=1e-5)  # what was not sent is what is left
    if kind == "int8":  # rounding error at most half a step of each tensor's scale
        assert np.abs(error).max() <= np.abs(update).max() / 127 / 2 + 1e-6


def test_topk_error_feedback_loses_nothing_over_rounds():
    """The mod keeps the residual in the client's context: sent + residual == sum of updates."""
    mod = compression.CompressionMod("topk", topk_ratio=0.05)
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    glob = _model_like_record(0)
    total_update, total_sent = 0.0, 0.0
    for rnd in range(3):
        local = _model_like_record(10 + rnd)
        msg = _train_message(glob, rnd + 1)
        reply = mod(msg, ctx, lambda m, c, local=local: _reply(m, local, 5))
        total_update = total_update + compression.flat(local) - compression.flat(glob)
        total_sent = total_sent + compression.decode_update(
            reply.content["arrays"], compression.sizes(glob)
        )
    residual = ctx.state[compression.RESIDUAL_KEY]["residual"].numpy()
    np.testing.assert_allclose(total_sent + residual, total_update, atol=1e-4)


def test_fedprox_term_pulls_toward_the_global_weights():
    from litlab.federated.client import ProximalTerm

    model = torch.nn.Linear(3, 1)
    global_params = {k: p.detach().clone() - 1.0 for k, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ProximalTerm(0.5, global_params).on_after_backward(None, model)
    for p in model.parameters():  # d/dw (mu/2)||w - w_g||^2 = mu (w - w_g) = 0.5
        torch.testing.assert_close(p.grad, torch.full_like(p, 0.5))


# --- config and runs -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "override,message",
    [
        ("federate.num_clients=0", "federate.num_clients=0 has the wrong type or value"),
        ("federate.alpha=0", "federate.alpha=0 has the wrong type or value; valid: a Dirichlet"),
        ("federate.fraction=1.5", "valid: a share of the clients in (0, 1]"),
        ("federate.fraction=0", "federate.fraction=0 has the wrong type or value"),
    ],
)
def test_bad_federate_config_is_one_line(tmp_path, override, message):
    from litlab.config.validate import entry_config
    from litlab.federated.settings import FederateRun

    cfg = compose("federate", [override], output_dir=tmp_path)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        entry_config(cfg, FederateRun)


def test_bad_federate_config_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "src/federate.py", "federate.num_clients=0", f"paths.log_dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: federate.num_clients=0 has the wrong type or value; valid: an integer >= 1"
    )
    assert not list((tmp_path / "federate" / "runs").glob("*"))  # nothing half-written


def test_two_clients_two_rounds_beat_round_zero(tmp_path):
    """The ClientApp's training and the server's FedAvg + central test, in-process (no Ray)."""
    from omegaconf import OmegaConf

    from litlab.config import build
    from litlab.federated.client import train_client
    from litlab.federated.recipe import _strategy
    from litlab.federated.server import CentralEvaluation

    cfg = compose(
        "federate",
        ["federate.num_clients=2", "federate.rounds=2", "extras.print_config=false"],
        output_dir=tmp_path,
    )
    dm = build.datamodule(cfg)
    dm.setup("fit")
    labels = partition.labels_of(dm.train_set)
    parts = [p.tolist() for p in partition.partition(labels, 2, "dirichlet", 0.5, cfg.seed)]
    evaluation = CentralEvaluation(build.model(cfg, dm), dm, build.trainer(cfg))
    strategy = Recorded(_strategy(cfg)[0])
    config = OmegaConf.to_container(cfg, resolve=True)
    arrays = evaluation.initial_arrays()
    accuracy = [evaluation(0, arrays)["test/acc"]]
    for rnd in (1, 2):
        msg = _train_message(arrays, rnd)
        replies = [
            Message(train_client(config, parts, [], msg, pid), reply_to=msg) for pid in (0, 1)
        ]
        strategy.global_arrays = arrays
        arrays, _ = strategy.aggregate_train(rnd, replies)
        accuracy.append(evaluation(rnd, arrays)["test/acc"])
    assert accuracy[2] > accuracy[0] + 0.3, accuracy  # round 0 is chance (~0.1)
    assert [r["clients"] for r in strategy.rounds] == [2, 2]


# --- real simulations (Flower's Ray backend), as a user runs them ----------------------------
def _run_marked(tmp_path, *overrides, timeout=600, flags=()):
    """Run federate.py with a unique marker in its environment; return (proc, leftovers): the
    processes still alive afterwards that carry the marker (Ray workers inherit it)."""
    marker = uuid.uuid4().hex
    env = {**os.environ, "LITLAB_TEST_MARKER": marker, "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable,
        "src/federate.py",
        *flags,
        f"paths.log_dir={tmp_path / 'logs'}",
        "extras.print_config=false",
        *overrides,
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    return proc, _marked(marker)


@pytest.mark.slow
def test_simulation_records_a_failing_client_and_leaves_no_process(tmp_path):
    """3 clients, client 2 always raises: recorded each round, the run goes on, the global
    checkpoint loads weights-only and eval.py reproduces the last round's accuracy."""
    import csv
    import json

    from litlab.checkpointing.run_config import CONFIG_KEY

    proc, leftovers = _run_marked(
        tmp_path,
        "federate.num_clients=3",
        "federate.rounds=2",
        "federate.fail_clients=[2]",
        "federate.partition=iid",  # with the next line, README's command
        "federate.compression=int8",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert leftovers == []
    run_dir = next((tmp_path / "logs" / "federate" / "runs").glob("*"))
    with open(run_dir / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["round"], r["clients"], r["failed"]) for r in rows] == [
        ("0", "0", "0"),
        ("1", "2", "1"),
        ("2", "2", "1"),
    ]
    assert rows[1]["failures"].startswith("2: injected failure")
    assert float(rows[2]["accuracy"]) > float(rows[0]["accuracy"])
    assert int(rows[1]["bytes_sent"]) < 0.3 * int(rows[1]["bytes_uncompressed"])
    assert (run_dir / "history.png").is_file() and (run_dir / "client_classes.png").is_file()
    ckpt = torch.load(run_dir / "global.ckpt", weights_only=True)
    assert ckpt[CONFIG_KEY]["federate"]["num_clients"] == 3
    ev = subprocess.run(
        [
            sys.executable,
            "src/eval.py",
            f"ckpt_path={run_dir / 'global.ckpt'}",
            f"paths.log_dir={tmp_path / 'logs'}",
            "extras.print_config=false",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ev.returncode == 0, ev.stderr[-3000:]
    eval_dir = next((tmp_path / "logs" / "eval" / "runs").glob("*"))
    metrics = json.loads((eval_dir / "metrics.json").read_text())
    assert metrics["test/acc"] == pytest.approx(float(rows[2]["accuracy"]), abs=1e-6)


@pytest.mark.slow
def test_a_round_without_any_successful_client_ends_the_run(tmp_path):
    proc, leftovers = _run_marked(
        tmp_path, "federate.num_clients=2", "federate.rounds=3", "federate.fail_clients=[0,1]"
    )
    assert proc.returncode == 1
    assert re.fullmatch(
        r"error: round 1: none of the 2 sampled clients succeeded \(client "
        r"[01]: injected failure \(federate.fail_clients\)\)",
        proc.stderr.strip(),
    )
    assert leftovers == []


def _marked(marker: str) -> list:
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("LITLAB_TEST_MARKER") == marker:
                found.append(p.cmdline())
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_ctrl_c_during_the_simulation_leaves_no_process(tmp_path):
    import signal
    import time

    marker = uuid.uuid4().hex
    env = {**os.environ, "LITLAB_TEST_MARKER": marker, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "src/federate.py",
            f"paths.log_dir={tmp_path}",
            "extras.print_config=false",
            "federate.num_clients=4",
            "federate.rounds=50",
        ],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    for line in proc.stdout:  # wait until the workers trained a round
        if "round 1/50" in line:
            break
    assert len(_marked(marker)) > 1  # Ray's processes are running
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, rest[-2000:]
    assert "interrupted: the simulation was stopped and its workers ended" in rest
    time.sleep(1)
    assert _marked(marker) == []


@pytest.mark.slow
def test_a_federated_sweep_with_fedprox_and_int8_gives_the_usual_summary(tmp_path):
    """README's `-m federate.alpha=...` sweep, with FedProx and int8 updates: one job per alpha,
    both completed, in the sweep summary every multirun writes; no process left behind."""
    import csv

    proc, left = _run_marked(
        tmp_path,
        "federate.alpha=0.1,1.0",
        "federate/strategy=fedprox",
        "federate.strategy.proximal_mu=0.1",
        "federate.compression=int8",
        "federate.num_clients=2",
        "federate.rounds=1",
        timeout=900,
        flags=["-m"],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not left, left
    [summary] = (tmp_path / "logs").glob("*/multiruns/*/summary.csv")
    rows = list(csv.DictReader(summary.open()))
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert sorted(r["federate.alpha"] for r in rows) == ["0.1", "1.0"]
