"""Federated learning (litlab.federated, src/federate.py): FedAvg aggregation, compressed
updates, FedProx, faults, every setting checked up front. Partitions: test_federated_
partitions.py; whole runs in-process: test_federated_runs.py; Ray runs: test_federated_ray.py."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.runs import command_in_process

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
from litlab.federated import compression
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
    decoded = compression.decode_sent(sent, glob)
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


# --- settings ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override,message",
    [
        (
            "federate.num_clients=0",
            "federate.num_clients=0 has the wrong type or value; valid: an integer >= 1",
        ),
        ("federate.alpha=0", "federate.alpha=0 has the wrong type or value; valid: a number > 0"),
        (
            "federate.fraction=1.5",
            "federate.fraction=1.5 has the wrong type or value; valid: a number between 0 and 1",
        ),
        (
            "federate.partition=skewed",
            "federate.partition=skewed has the wrong type or value; valid: iid | dirichlet",
        ),
        (
            "federate.backend.client_resources.num_cpus=0",
            "federate.backend.client_resources.num_cpus=0 has the wrong type or value; valid: a number > 0",
        ),
        (
            "federate.backend.client_resources.num_cpus=4",
            (
                "federate.backend.client_resources.num_cpus=4 is more than the 2 CPUs of "
                "federate.backend.init_args.num_cpus: no client could run"
            ),
        ),
        ("+federate.rouns=3", "unknown key federate.rouns; did you mean rounds?"),
        (
            "federate.dp=5",
            "federate.dp=5 has the wrong type or value; valid: a group of keys (mode, clipping_norm,",
        ),
        (
            "federate.backend=null",
            "federate.backend=null has the wrong type or value; valid: a group",
        ),
        (
            "federate.fail_clients=[12]",
            "federate.fail_clients=[12] names client 12; clients are 0 to 9",
        ),
        (
            "federate.local_epochs=many",
            "federate.local_epochs=many has the wrong type or value; valid: an integer >= 1 or auto",
        ),
    ],
)
def test_bad_federate_settings_are_one_line(tmp_path, override, message):
    from litlab.federated.federation import check_federated

    cfg = compose("federate", [override], output_dir=tmp_path)
    with pytest.raises(UserError) as err:
        check_federated(cfg)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_local_epochs_auto_follows_the_task_kind(tmp_path):
    from litlab.federated.federation import check_federated

    for overrides, epochs in ((["data=mutag", "model=gin"], 5), (["model=gnn"], 20), ([], 1)):
        cfg = compose("federate", overrides, output_dir=tmp_path)
        assert check_federated(cfg).local_epochs == epochs == cfg.trainer.max_epochs


def test_zero_cpus_per_client_exits_2_before_ray_starts(tmp_path, capfd, monkeypatch):
    """In the worker (its real `cli.run`; test_refusals runs federate.py's refusals as
    commands): one line, exit 2, and Ray neither started nor, where no test imported it yet,
    imported."""
    imported = "ray" in sys.modules
    if imported:  # a test before this one imported Ray: its start would raise here
        monkeypatch.setattr(sys.modules["ray"], "init", lambda *a, **k: pytest.fail("Ray started"))
    code, out, err = command_in_process(
        "federate.py",
        ["federate.backend.client_resources.num_cpus=0"],
        tmp_path,
        capfd,
        quiet=False,
    )
    assert code == 2, err[-2000:]
    assert err.strip() == (
        "error: federate.backend.client_resources.num_cpus=0 has the wrong type or value; "
        "valid: a number > 0"
    )
    assert "ray" not in out.lower() and (imported or "ray" not in sys.modules)
    assert not list((tmp_path / "federate" / "runs").glob("*"))  # nothing half-written


def test_an_experiment_made_for_train_federates_without_its_selection_callbacks():
    """experiment=gat_cora brings the paper's joint checkpoint and early stopping; clients do
    not validate, so federate leaves them out (the client Trainer refused them: checkpointing
    is off)."""
    from litlab.config import build
    from litlab.federated.federation import check_federated

    cfg = compose("federate", ["experiment=gat_cora"])
    assert "joint_checkpoint" in cfg.callbacks
    check_federated(cfg)
    assert [k for k, v in cfg.callbacks.items() if v is not None] == []
    trainer = build.trainer(cfg)
    assert not trainer.checkpoint_callbacks and trainer.max_epochs == 20  # local epochs, nodes


def _stored(tmp_path, overrides):
    """The run config a federated run started with `overrides` stores in its checkpoints."""
    from omegaconf import OmegaConf, open_dict

    from litlab.federated.federation import check_federated

    cfg = compose("federate", overrides, output_dir=tmp_path / "run")
    check_federated(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_container(cfg, resolve=True)


# (the run's overrides, this resume's overrides, what the resume holds then, or the refusal)
RESUMES = {
    "rounds, as in the issue": (
        ["federate.rounds=8"],
        [],
        {"federate.rounds": 8},
    ),
    "an experiment's callback settings (issue 46)": (
        ["experiment=diabetes"],
        [],
        {"callbacks.early_stopping.patience": 20, "model._target_": "regressor"},
    ),
    "a strategy group and its key": (
        ["federate/strategy=fedprox", "federate.strategy.proximal_mu=0.3"],
        [],
        {"federate.strategy.proximal_mu": 0.3, "federate.strategy._target_": "fedprox"},
    ),
    "the seed and what interpolates it": (
        ["seed=7", "model.net.channels=[8,16]", "federate.local_epochs=3"],
        [],
        {"federate.seed": 7, "data.seed": 7, "trainer.max_epochs": 3},
    ),
    "a group given otherwise": (
        ["federate/strategy=fedprox"],
        ["federate/strategy=fedavg"],
        (
            "ckpt_path: federate.strategy._target_ is flwr.serverapp.strategy.FedProx in the run "
            "to resume, flwr.serverapp.strategy.FedAvg here"
        ),
    ),
    "an interpolated key given otherwise": (
        ["seed=7"],
        ["seed=8"],
        "ckpt_path: seed is 7 in the run to resume, 8 here; drop seed=",
    ),
}


@pytest.mark.parametrize("case", list(RESUMES))
def test_a_resume_takes_the_runs_settings_unless_given_otherwise(case, tmp_path):
    """What the run was started with is the default of the resume (the printed command works
    as printed); a setting this command gives that differs is one line naming both values."""
    from omegaconf import OmegaConf

    from litlab.checkpointing import resume as run_settings
    from litlab.federated import state

    started, given, expected = RESUMES[case]
    stored = _stored(tmp_path, started)
    cfg = compose("federate", given, output_dir=tmp_path / "run")

    def adopt():
        return run_settings.adopt(cfg, stored, "last.ckpt", state.ROOTS, state.TARGETS, state.FREE)

    if isinstance(expected, str):
        with pytest.raises(UserError) as err:
            adopt()
        assert str(err.value).startswith(expected) and "\n" not in str(err.value)
        return
    adopt()
    for key, value in expected.items():
        held = OmegaConf.select(cfg, key)
        assert held == value or str(held).lower().endswith(f".{value}"), (key, held)


def test_the_watchdog_ends_a_descendant_whose_environment_shows_no_mark():
    """Ray's agents write their title over their environment (/proc shows none: no mark) and
    are re-parented to init when the raylet dies: the watchdog ends them as descendants it
    saw. Here a marked 'raylet' starts an 'agent' without the mark and is killed."""
    import os
    import time
    import uuid

    import psutil

    from litlab.federated.watchdog import MARK, Tree, end_marked

    mark = uuid.uuid4().hex
    start_agent = (
        "import subprocess, time; subprocess.Popen(['sleep', '120'], env={}); time.sleep(120)"
    )
    raylet = subprocess.Popen([sys.executable, "-c", start_agent], env={**os.environ, MARK: mark})
    tree = Tree(raylet.pid)
    deadline = time.time() + 30
    while not tree.known and time.time() < deadline:  # the watchdog polls as long as it runs
        tree.seen()
        time.sleep(0.1)
    [agent] = [psutil.Process(pid) for pid in tree.known]
    raylet.kill()
    raylet.wait()
    assert agent.is_running() and MARK not in agent.environ()
    end_marked(mark, {os.getpid()}, grace_s=1.0, tree=tree)
    assert not agent.is_running() or agent.status() == psutil.STATUS_ZOMBIE


def test_the_printed_resume_command_names_where_the_run_is(tmp_path):
    """A run under another paths.log_dir is refused without it (its run dir is outside the
    default log dir), and an experiment sets keys a resume cannot take from the run: the
    command a stop prints repeats the run's overrides, quoted, with ckpt_path its run dir."""
    import shlex

    from litlab.federated import state

    logs = tmp_path / "my logs"
    given = [f"paths.log_dir={logs}", "experiment=diabetes", "federate.rounds=8"]
    compose("federate", given, output_dir=tmp_path)
    run = logs / "federate" / "runs" / "2026-12-01_00-00-00"
    printed = state.federated_resume_command(run)
    assert printed.startswith("python src/federate.py ")
    assert shlex.split(printed)[2:] == [*given, f"ckpt_path={run}"]
