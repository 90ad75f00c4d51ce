"""Whole federated runs through `litlab.federated.recipe.federate`, with the in-process engine
of tests/federated_engine.py (the same server loop and ClientApp as the Ray simulation, minus
Ray's start): stop and resume, client-side evaluation, and every domain learning. Ray's own
process handling is tested in test_federated_ray.py."""

import csv

import pytest
import torch
from conftest import compose
from federated_engine import Stopped, engine

import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)

# small and quick: 2 clients, a few batches each
SMALL = [
    "federate.num_clients=2",
    "federate.rounds=3",
    "trainer.limit_train_batches=3",
    "extras.print_config=false",
]


def _run(out, overrides, stop_in_round=None):
    from litlab.federated.recipe import federate

    merged = dict(o.split("=", 1) for o in [*SMALL, *overrides])  # later ones win
    cfg = compose("federate", [f"{k}={v}" for k, v in merged.items()], output_dir=out)
    return federate(cfg, engine=engine(stop_in_round))


def _history(run_dir):
    with open(run_dir / "history.csv") as f:
        return list(csv.DictReader(f))


def _weights(run_dir):
    return torch.load(run_dir / "global.ckpt", weights_only=True)["state_dict"]


def test_a_stopped_run_resumes_to_the_same_global_weights_bit_for_bit(tmp_path):
    """Stopped while round 3 trains: rounds 0-2 are on disk (history, global model); resuming
    with other settings is refused; resumed with ckpt_path=<run dir>, it ends with exactly the
    weights and history of a run that never stopped (clients sampled by fraction=0.5, so
    sampling is resumed too). The history holds the clients' own evaluation."""
    from litlab.errors import UserError

    overrides = ["federate.fraction=0.5", "federate.num_clients=3", "federate.rounds=4"]
    whole = tmp_path / "whole"
    expected = _run(whole, overrides)
    _check_client_evaluation(_history(whole), expected)

    stopped = tmp_path / "stopped"
    with pytest.raises(Stopped):
        _run(stopped, overrides, stop_in_round=3)
    assert [r["round"] for r in _history(stopped)] == ["0", "1", "2"]
    saved = torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["litlab_federated"]["round"] == 2
    assert (stopped / "global.ckpt").samefile(stopped / "checkpoints" / "last.ckpt")
    with pytest.raises(UserError, match=r"^ckpt_path: federate.alpha is 0.5 in the run to "):
        _run(stopped, [*overrides, "federate.alpha=0.9", f"ckpt_path={stopped}"])
    assert [r["round"] for r in _history(stopped)] == ["0", "1", "2"]  # untouched

    resumed = _run(stopped, [*overrides, f"ckpt_path={stopped}"])
    assert resumed == expected  # final test metrics and client evaluation, exactly
    a, b = _weights(whole), _weights(stopped)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    drop = ("train_s",)  # wall time differs
    rows = [{k: v for k, v in r.items() if k not in drop} for r in _history(whole)]
    assert rows == [{k: v for k, v in r.items() if k not in drop} for r in _history(stopped)]
    assert [r["clients"] for r in rows] == ["0", "1", "1", "1", "1"]  # fraction 0.5 of 3


def _check_client_evaluation(rows, metrics):
    """Each round's clients test the new global model on their held-out part: weighted mean
    and worst client, beside the central test, in history.csv and metrics."""
    for column in ("client_acc_mean", "client_acc_worst", "client_worst_id", "client_loss_mean"):
        assert rows[0][column] == ""  # round 0: no client trained yet
        assert rows[-1][column] != ""
    mean, worst = float(rows[-1]["client_acc_mean"]), float(rows[-1]["client_acc_worst"])
    assert 0.3 < worst <= mean <= 1.0  # they learned; the worst is not above the mean
    assert rows[-1]["client_eval_clients"] == "1"  # the round's one sampled client
    assert int(rows[-1]["client_eval_examples"]) > 20  # its share of the validation split
    assert metrics["federate/client_acc_mean"] == pytest.approx(mean)


# --- every domain learns ---------------------------------------------------------------------
@pytest.mark.slow
def test_node_classification_subgraph_clients_learn_above_chance(tmp_path, shared_data):
    """Cora split into 4 label-skewed subgraph clients (edges between clients dropped): the
    global GCN beats chance (1/7) by far on the whole graph's test nodes (0.510 here; central
    training reaches ~0.81: the clients see ~35 training nodes and part of the edges each)."""
    planetoid = shared_data("Planetoid/Cora")
    metrics = _run(
        tmp_path,
        [
            "data=cora",
            "model=gnn",
            f"data.data_dir={planetoid.parents[1]}",
            "federate.num_clients=4",
            "federate.rounds=10",  # local_epochs=auto: 20 full-graph steps a round
            "trainer.limit_train_batches=1.0",
        ],
    )
    assert metrics["test/acc"] > 0.4, metrics
    assert metrics["federate/client_acc_mean"] > 0.35, metrics


@pytest.mark.slow
def test_volume_segmentation_whole_volume_clients_learn_above_chance(tmp_path):
    """Phantom volumes, whole volumes per client (Dirichlet over their dominant structure):
    the global U-Net's Dice is far above an untrained one's (here 0.45 after 4 rounds: the
    organ 0.88, the small nodule not yet learned; round 0: 0.05)."""
    metrics = _run(
        tmp_path,
        [
            "model=unet3d",
            "data.num_volumes=24",
            "data.size=24",
            "data.patch_size=[16,16,16]",
            "model.net.channels=[8,16,32]",
            "model.net.strides=[2,2]",
            "federate.num_clients=2",
            "federate.rounds=4",
            "federate.local_epochs=2",
            "trainer.limit_train_batches=1.0",
        ],
    )
    rows = _history(tmp_path)
    assert float(rows[0]["test/dice"]) < 0.1
    assert metrics["test/dice"] > 0.3 and metrics["test/dice_1"] > 0.7, metrics
    assert metrics["federate/client_dice_mean"] > 0.3, metrics


@pytest.mark.slow
def test_federated_proteins_reaches_the_bar(tmp_path, shared_data):
    """GIN on PROTEINS, Dirichlet(0.5) over 10 clients, 20 rounds, the graph defaults
    (local_epochs=auto: 5): >= 0.68 test accuracy on the fixed split (fold 0)."""
    tu = shared_data("TUDataset/PROTEINS_full")
    metrics = _run(
        tmp_path,
        [
            "data=proteins",
            "model=gin",
            f"data.data_dir={tu.parents[1]}",
            "federate.num_clients=10",
            "federate.rounds=20",
            "trainer.limit_train_batches=1.0",
        ],
    )
    assert metrics["test/acc"] >= 0.68, metrics
