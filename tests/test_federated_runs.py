"""Whole federated runs through `litlab.federated.federation.federate`, with the in-process engine
of tests/federated_engine.py (the same server loop and ClientApp as the Ray simulation, minus
Ray's start): stop and resume, client-side evaluation, and every domain learning. Ray's own
process handling is tested in test_federated_ray.py."""

import csv

import pytest
import torch
from helpers.federated_engine import Stopped, engine

import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)
from litlab.config.compose import compose

# small and quick: 2 clients, a few batches each
SMALL = [
    "federate.num_clients=2",
    "federate.rounds=3",
    "trainer.limit_train_batches=3",
    "extras.print_config=false",
]


def _run(out, overrides, stop_in_round=None, small=True):
    from litlab.federated.federation import federate

    merged = dict(o.split("=", 1) for o in [*SMALL * small, *overrides])  # later ones win
    cfg = compose("federate", [f"{k}={v}" for k, v in merged.items()], output_dir=out)
    return federate(cfg, engine=engine(stop_in_round))


def _history(run_dir):
    with open(run_dir / "history.csv") as f:
        return list(csv.DictReader(f))


def _weights(run_dir):
    return torch.load(run_dir / "global.ckpt", weights_only=True)["state_dict"]


def test_a_stopped_run_resumes_to_the_same_global_weights_bit_for_bit(tmp_path):
    """Stopped while round 3 trains: rounds 0-2 are on disk (history, global model); resuming
    with other settings is refused; resumed with just ckpt_path=<run dir>, it ends with exactly
    the weights and history of a run that never stopped (clients sampled by fraction=0.5, so
    sampling is resumed too). The history holds the clients' own evaluation."""
    from litlab.errors import UserError

    overrides = ["federate.fraction=0.5", "federate.num_clients=3", "federate.rounds=4"]
    whole = tmp_path / "whole"
    expected = _run(whole, overrides)
    _check_client_evaluation(_history(whole), expected)

    logs = tmp_path / "logs"  # where `ckpt_path=last` finds it
    stopped = logs / "federate" / "runs" / "2026-01-01_00-00-00"
    with pytest.raises(Stopped):
        _run(stopped, overrides, stop_in_round=3)
    assert [r["round"] for r in _history(stopped)] == ["0", "1", "2"]
    saved = torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["litlab_federated"]["round"] == 2
    assert (stopped / "global.ckpt").samefile(stopped / "checkpoints" / "last.ckpt")
    with pytest.raises(UserError, match=r"^ckpt_path: federate.alpha is 0.5 in the run to "):
        _run(stopped, [*overrides, "federate.alpha=0.9", f"ckpt_path={stopped}"])
    with pytest.raises(UserError) as refused:  # given explicitly: refused, both values named
        _run(stopped, [f"ckpt_path={stopped}", "federate.rounds=8"], small=False)
    assert str(refused.value).startswith(
        "ckpt_path: federate.rounds is 4 in the run to resume, 8 here; drop federate.rounds="
    )
    assert "\n" not in str(refused.value)
    assert [r["round"] for r in _history(stopped)] == ["0", "1", "2"]  # untouched

    # as README's `ckpt_path=last` (the stop prints the run dir): no other setting given, the
    # run's own are taken (4 rounds of 3 clients, 3 batches each), not federate.yaml's defaults
    last = ["ckpt_path=last", f"paths.log_dir={logs}", "extras.print_config=false"]
    resumed = _run(stopped, last, small=False)
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
    (local_epochs=auto: 5): >= 0.68 test accuracy on the fixed split (fold 0). Without the
    clients' own evaluation (a sixth of the time): each client call seeds itself, so the
    server's test accuracy is the same to the last digit (0.7232, as docs/federated.md's)."""
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
            "federate.client_eval=false",
        ],
    )
    assert metrics["test/acc"] >= 0.68, metrics


# --- a resume file is data -------------------------------------------------------------------
RESUME_FILES = pytest.mark.xdist_group("federated_stopped")  # one worker builds the run once


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A 2-client run stopped in round 2: round 1 is on disk."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    with pytest.raises(Stopped):
        _run(run, ["federate.rounds=3"], stop_in_round=2)
    return run


def _state(c):
    return c["litlab_federated"]


def _config(c):
    return c["litlab_config"]


def _set_rng(part, value):
    return lambda c: _state(c)["rng"].__setitem__(part, value)


# what a crafted or damaged last.ckpt holds -> what the one line names
GARBAGE = {
    "round as text": (lambda c: _state(c).update(round="1"), "not a federated run's checkpoint"),
    "huge round": (lambda c: _state(c).update(round=10**30), "round="),
    "rounds a dict": (lambda c: _state(c).update(rounds={"round": 1}), "rounds="),
    "a round's field a list": (lambda c: _state(c)["rounds"][0].update(clients=[1]), "clients"),
    "an extra field": (lambda c: _state(c).update(evil={"_target_": "os.system"}), "evil="),
    "a missing field": (lambda c: _state(c).pop("partitions"), "partitions"),
    "rounds past the round": (lambda c: _state(c).update(round=3), "rounds 1 to 3"),
    "python rng": (_set_rng("python", [3, [1, 2], None]), "its RNG state"),
    "numpy rng keys": (
        _set_rng("numpy", ["MT19937", torch.zeros(5, dtype=torch.int64), 0, 0, 0.0]),
        "its RNG state",
    ),
    "torch rng a float tensor": (_set_rng("torch", torch.zeros(3)), "its RNG state"),
    "weights of another net": (
        lambda c: c["state_dict"].update({k: torch.zeros(1) for k in c["state_dict"]}),
        "its weights do not fit",
    ),
    "settings of the wrong type": (
        lambda c: _config(c)["federate"].update(num_clients="many"),
        "the run to resume has federate.num_clients=many has the wrong type or value",
    ),
    "settings a list": (lambda c: _config(c).update(federate=[1, 2]), "federate"),
    "a strategy that is not one": (
        lambda c: _config(c)["federate"]["strategy"].update(_target_="shutil.rmtree"),
        "federate.strategy._target_=shutil.rmtree",
    ),
    "a target inside the trainer": (
        lambda c: _config(c)["trainer"].update(plugins=[{"_target_": "shutil.copy"}]),
        "_target_ in trainer.plugins",
    ),
    "an interpolation": (
        lambda c: _config(c)["federate"].update(alpha="${oc.env:HOME}"),
        "interpolation or resolver in federate.alpha",
    ),
    "a data folder elsewhere": (
        lambda c: _config(c)["data"].update(data_dir="/tmp/elsewhere"),
        "data.data_dir=/tmp/elsewhere, outside the data dir of its run",
    ),
}


def _files(folder):
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


GARBAGE_FAST = (
    "huge round",
    "an extra field",
    "torch rng a float tensor",
    "a strategy that is not one",
)


@RESUME_FILES
@pytest.mark.parametrize(  # one case of each class fast; the rest in the slow stage
    "case", [pytest.param(c, marks=() if c in GARBAGE_FAST else pytest.mark.slow) for c in GARBAGE]
)
def test_a_garbage_resume_file_is_one_line_and_nothing_is_written(stopped_run, case, tmp_path):
    """Every field of the resume file (round state, RNG states, weights, stored settings) is
    checked before it is used: one line naming the bad one, the run dir as it was."""
    import shutil

    from litlab.errors import UserError

    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    edit, named = GARBAGE[case]
    edit(ckpt)
    torch.save(ckpt, last)
    (run / "global.ckpt").unlink()
    (run / "global.ckpt").hardlink_to(last)
    before = _files(run)
    with pytest.raises(UserError) as err:
        _run(run, [f"ckpt_path={run}"], small=False)
    assert "\n" not in str(err.value) and named in str(err.value), str(err.value)
    assert _files(run) == before


@RESUME_FILES
@pytest.mark.parametrize(
    "link", ["history.csv", pytest.param("metrics.json", marks=pytest.mark.slow), "checkpoints"]
)
@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_nothing_is_written_through_a_link_that_leaves_the_run_dir(
    stopped_run, link, kind, tmp_path
):
    """A run dir whose file (or folder) is a link to elsewhere is refused before the resume
    writes anything: the file outside is untouched."""
    import shutil

    from litlab.errors import UserError

    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    victim = tmp_path / "victim"
    if link == "checkpoints":
        if kind == "hardlink":
            pytest.skip("folders have no hard links")
        shutil.move(run / "checkpoints", victim)
        (run / "checkpoints").symlink_to(victim)
    else:
        victim.write_text("secret")
        (run / link).unlink(missing_ok=True)
        if kind == "symlink":
            (run / link).symlink_to(victim)
        else:
            (run / link).hardlink_to(victim)
    before = _files(tmp_path)
    with pytest.raises(
        UserError, match=r"outside the run dir, and litlab writes nothing through a link"
    ) as err:
        _run(run, [f"ckpt_path={run}"], small=False)
    assert "\n" not in str(err.value)
    assert _files(tmp_path) == before
