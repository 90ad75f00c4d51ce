"""compress.py on graph nets (GCN, GAT, GraphSAGE, GIN): structured pruning gives a smaller
plain GNN holding the most important channels, int8 quantizes the dense layers as export.py
does, an int8 file that lost too much is not kept, and a ratio that would leave a layer without
channels is one line with nothing written."""

import json

import pytest
import torch

from litlab.domains.graph import prune as graph_prune
from litlab.domains.graph.nets import GNN
from litlab.errors import UserError

GNN_TARGET = "litlab.domains.graph.nets.GNN"
NODE, GRAPH = "node_classification", "graph_classification"


def _graph(nodes=30, features=10):
    torch.manual_seed(0)
    x, edges = torch.randn(nodes, features), torch.randint(0, nodes, (2, 4 * nodes))
    return x, edges, torch.arange(nodes) // 10  # three graphs for graph-level nets


def _prune(args: dict, ratio: float, hidden=16, steps=2, round_to=None):
    net = GNN(hidden_channels=hidden, **args).eval()

    def build(width):
        return GNN(hidden_channels=width, **args).eval()

    cfg = {"_target_": GNN_TARGET, "hidden_channels": hidden, **args}
    return net, *graph_prune.prune(net, cfg, build, ratio, steps, round_to, 2)


def _count(net) -> int:
    return sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize(
    "conv,extra",
    [
        ("gcn", {}),
        ("gat", {"heads": 4}),
        ("sage", {}),
        ("gin", {}),
        ("gcn", {"residual": True, "norm": "batch_norm"}),
        ("gin", {"jumping_knowledge": "cat", "norm": "layer_norm"}),
    ],
)
@pytest.mark.parametrize("task", [NODE, GRAPH])
def test_each_graph_net_prunes_under_the_ratio_as_a_plain_smaller_gnn(conv, extra, task):
    """At most half the parameters, and the pruned net IS the config's GNN with the smaller
    hidden_channels (what the checkpoint stores: eval, export and serve build it as is)."""
    args = {"in_channels": 10, "num_classes": 3, "conv": conv, "kind": task, "num_layers": 3}
    net, small, width = _prune({**args, **extra}, 0.5)
    assert _count(small) <= 0.5 * _count(net) and 1 <= width < 16
    rebuilt = GNN(hidden_channels=width, **args, **extra)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in small.state_dict().items()
    }
    x, edges, batch = _graph()
    out = small(x, edges, None if task == NODE else batch)
    assert out.shape == (30 if task == NODE else 3, 3) and torch.isfinite(out).all()
    if conv == "gat":
        assert width % 4 == 0  # every head keeps the same number of channels


def _kill(net, key: str, dim: int, dead: torch.Tensor) -> None:
    with torch.no_grad():
        net.state_dict()[key].index_fill_(dim, dead, 0.0)


@pytest.mark.parametrize("conv", ["gcn", "sage", "gat", "gin"])
def test_channels_that_carry_nothing_go_first_and_outputs_stay_the_same(conv):
    """Half the hidden channels made dead (their producing rows, biases and the next layer's
    columns zero): pruning to that width must drop exactly them, so the pruned net computes
    the same class scores (a wrong channel kept, or rows and columns mismatched, would not)."""
    heads = 2 if conv == "gat" else 1
    args = {"in_channels": 10, "num_classes": 3, "conv": conv, "heads": heads}
    net = GNN(hidden_channels=16, **args).eval()
    dead = torch.arange(8, 16)
    if conv == "gat":  # per head: channels 4..7 of 8 dead (the same count in each head)
        dead = torch.tensor([h * 8 + c for h in range(2) for c in range(4, 8)])
        for key in ("convs.0.att_src", "convs.0.att_dst"):
            _kill(net, key, 2, torch.arange(4, 8))
    produce = {
        "gcn": ["convs.0.lin.weight", "convs.0.bias"],
        "sage": ["convs.0.lin_l.weight", "convs.0.lin_l.bias", "convs.0.lin_r.weight"],
        "gat": ["convs.0.lin.weight", "convs.0.bias"],
        "gin": ["convs.0.nn.lins.1.weight", "convs.0.nn.lins.1.bias"],
    }[conv]
    read = {"gcn": ["convs.1.lin.weight"], "sage": ["convs.1.lin_l.weight", "convs.1.lin_r.weight"],
            "gat": ["convs.1.lin.weight"], "gin": ["convs.1.nn.lins.0.weight"]}[conv]  # fmt: skip
    for key in produce:
        _kill(net, key, 0, dead)
    for key in read:
        _kill(net, key, 1, dead)
    if conv == "gin":  # its MLP's inner units too: the first half of them carry nothing
        for key in ("convs.0.nn.lins.0.weight", "convs.0.nn.lins.0.bias"):
            _kill(net, key, 0, dead)
        _kill(net, "convs.0.nn.lins.1.weight", 1, dead)
    small = GNN(hidden_channels=8, **args).eval()
    graph_prune.copy_kept(net, small)
    x, edges, _ = _graph(features=10)
    torch.testing.assert_close(small(x, edges), net(x, edges))


@pytest.mark.parametrize(
    "args,ratio,expected",
    [
        ({"conv": "gcn"}, 0.01, "compress.prune.ratio=0.01 would leave the gcn net's hidden"),
        ({"conv": "gat", "heads": 8}, 0.2, "8 channel(s) per layer (8 head(s))"),
        ({"conv": "gin", "kind": GRAPH}, 0.01, "would leave the gin net's hidden layers"),
        ({"conv": "sage", "num_layers": 1}, 0.5, "no hidden channels to prune"),
        ({"conv": "gcn", "residual": True, "in_channels": 16}, 0.5, "cannot lose channels"),
    ],
)
def test_a_ratio_or_net_that_leaves_no_channels_is_one_line(args, ratio, expected):
    args = {"in_channels": 10, "num_classes": 3, **args}
    with pytest.raises(UserError) as err:
        _prune(args, ratio)
    message = str(err.value)
    assert expected in message and "\n" not in message, message
    if "would leave" in message:
        assert "valid: a ratio in [" in message  # says what would work


def test_an_int8_file_that_lost_too_much_is_removed_and_the_report_says_why(tmp_path):
    from litlab.compression import recipe as report

    int8 = tmp_path / "2_quantize.onnx"
    int8.write_bytes(b"onnx")
    rows = [
        {"stage": "original", "test/acc": 0.81},
        {"stage": "prune", "test/acc": 0.80, "checkpoint": "1_prune.ckpt"},
        {"stage": "quantize", "test/acc": 0.77, "onnx": str(int8), "onnx_mb": 0.1},
    ]
    from types import SimpleNamespace

    from litlab.compression.recipe import judge_int8

    graphs = SimpleNamespace(kind="node_classification")  # its kind allows 2%
    judge_int8(rows, "test/acc", 0.05, graphs)  # 0.77 is 96.3% of 0.80: within 5%, kept
    assert int8.exists() and rows[-1]["verdict"].startswith("int8 kept")
    judge_int8(rows, "test/acc", None, graphs)  # the kind's 2%
    line = rows[-1]["verdict"]
    assert "\n" not in line and "96.2% of the prune stage's 0.8000" in line, line
    assert "max_drop=0.02" in line and not int8.exists() and rows[-1]["onnx"] is None
    report.write_compress_report(rows, "test/acc", tmp_path, {"source": "x"})
    assert line in (tmp_path / "compress_report.md").read_text()
    assert json.loads((tmp_path / "compress_report.json").read_text())["stages"][-1]["verdict"]


# --- as a user runs them: a real (tiny) run of the default graph, compress.py in-process ---
QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null"]
COMPRESS_QUIET = [*QUIET, "report.budget_s=0.1"]
SBM = pytest.mark.xdist_group("graph_compress")  # one worker trains the run once


@pytest.fixture(scope="module")
def sbm_ckpt(tmp_path_factory):
    """`train.py model=gnn` (a GCN on the synthetic SBM graph), 10 full-graph epochs."""
    from litlab import api

    logs = tmp_path_factory.mktemp("sbm") / "logs"
    result = api.train(["model=gnn", "trainer.max_epochs=10", *QUIET, f"paths.log_dir={logs}"])
    return result.best_checkpoint


def _compress(ckpt, logs, *overrides):
    from litlab import api
    from litlab.compression.recipe import compress

    return api.run(
        "compress", [f"ckpt_path={ckpt}", *COMPRESS_QUIET, f"paths.log_dir={logs}", *overrides],
        compress,
    )  # fmt: skip


@SBM
def test_a_ratio_no_graph_net_reaches_is_one_line_and_writes_nothing(sbm_ckpt, tmp_path):
    from helpers.refusals import refused

    from litlab.compression.recipe import compress

    for ratio in ("0.05",):  # the SBM GCN: 1 hidden channel keeps ~7% of it (0.01: above)
        overrides = [f"ckpt_path={sbm_ckpt}", f"compress.prune.ratio={ratio}", *COMPRESS_QUIET]
        message, _ = refused("compress", overrides, compress, tmp_path / "logs")
        assert f"compress.prune.ratio={ratio} would leave the gcn net's hidden" in message


@SBM
@pytest.mark.slow  # a fine-tuning, two ONNX exports and a calibration: ~20 s of CPU
def test_graph_prune_then_quantize_as_a_user_runs_it(sbm_ckpt, tmp_path):
    """compress=[prune,quantize] on a GCN: half the parameters or fewer, the fine-tuned
    checkpoint is a plain GNN that eval.py reproduces, the int8 ONNX file holds the metric."""
    from litlab import api
    from litlab.runs.rebuild import load_run

    rows = _compress(
        sbm_ckpt, tmp_path / "logs", "compress=[prune,quantize]", "compress.prune.ratio=0.5",
        "trainer.max_epochs=20",
    )  # fmt: skip
    original, pruned, int8 = rows
    assert pruned["params"] <= 0.5 * original["params"]
    assert pruned["test/acc"] >= 0.95 * original["test/acc"], rows
    assert int8["onnx"] and int8["test/acc"] >= pruned["test/acc"] - 0.02, rows
    assert int8["latency_ms_onnx_b1"] > 0 and int8["latency_ms_onnx_fp32_b1"] > 0
    run = load_run(pruned["checkpoint"])  # weights-only, rebuilt from its config
    assert run.config.model.net._target_ == GNN_TARGET and run.config.model.net.hidden_channels < 16
    again = api.evaluate([f"ckpt_path={pruned['checkpoint']}", "predictions=false",
                          "extras.print_config=false", f"paths.log_dir={tmp_path / 'ev'}"])  # fmt: skip
    assert again.metrics["test/acc"] == pytest.approx(pruned["test/acc"], abs=1e-6)


# --- real data, as a user runs each command (slow stage): train, compress, eval, export ---
GRAPH_QUICK = ["logger=[]", "callbacks.model_summary=null", "callbacks.lr_monitor=null"]


def _report(log_dir):
    run = max((log_dir / "compress" / "runs").glob("*"))
    stages = json.loads((run / "compress_report.json").read_text())["stages"]
    return run, {s["stage"]: s for s in stages}


def _trained(cli, tmp_path, data, *overrides):
    cli("train.py", *overrides, f"paths.data_dir={data}", *GRAPH_QUICK, timeout=900)
    return next((tmp_path / "logs" / "train" / "runs").glob("*/checkpoints/epoch_*.ckpt"))


def _eval_and_export(cli, tmp_path, ckpt, data) -> tuple[float, dict]:
    from helpers.runs import results

    proc = cli("eval.py", f"ckpt_path={ckpt}", f"paths.data_dir={data}", "predictions=false")
    (evaluated,) = results(proc.stdout)
    cli("export.py", f"ckpt_path={ckpt}", f"paths.data_dir={data}", "formats=[onnx,onnx_int8]",
        "latency.budget_s=0.1", timeout=600)  # fmt: skip
    out = max((tmp_path / "logs" / "export" / "runs").glob("*"))
    report = json.loads((out / "export_report.json").read_text())
    return evaluated["test/acc"], report | {"dir": out}


@pytest.mark.slow  # GCN on real Cora: 100 epochs, a 100-epoch fine-tuning, eval, export
@pytest.mark.parametrize(
    "conv",
    ["gcn", pytest.param("gat", marks=pytest.mark.bench)],  # GAT: 7 min; pruned fast above too
)
def test_a_pruned_cora_net_keeps_its_accuracy_evaluates_and_exports(conv, cli, shared_data,
                                                                     tmp_path):  # fmt: skip
    data = shared_data("Planetoid").parent
    ckpt = _trained(cli, tmp_path, data, f"experiment={conv}_cora", "trainer.max_epochs=100")
    cli("compress.py", f"ckpt_path={ckpt}", f"paths.data_dir={data}", "compress=prune",
        "compress.prune.ratio=0.5", "trainer.max_epochs=100", *COMPRESS_QUIET[1:],
        timeout=900)  # fmt: skip
    run, stages = _report(tmp_path / "logs")
    original, pruned = stages["original"], stages["prune"]
    assert pruned["params"] <= 0.5 * original["params"]
    assert pruned["test/acc"] >= 0.95 * original["test/acc"], (original, pruned)
    evaluated, exported = _eval_and_export(cli, tmp_path, run / "1_prune.ckpt", data)
    assert evaluated == pytest.approx(pruned["test/acc"], abs=1e-4)
    assert exported["formats"]["onnx"]["ok"], exported
    if conv == "gcn":  # serve.py answers with the pruned net's file
        from feature_matrix import Row
        from matrix_cells import Ctx, clean_env, serve

        ctx = Ctx(tmp_path / "logs", clean_env(data), onnx=str(exported["dir"] / "model.onnx"))
        cell = serve(Row("served", "served", []), ctx)
        assert cell.status == "ok" and "predictions" in cell.text, cell.text


@pytest.mark.slow  # GIN on real MUTAG: 30 epochs, prune + 5-epoch fine-tuning, int8, eval
def test_a_gin_on_mutag_prunes_and_quantizes_and_its_pruned_checkpoint_exports(
    cli, shared_data, tmp_path
):
    data = shared_data("TUDataset").parent
    ckpt = _trained(cli, tmp_path, data, "experiment=gin_mutag", "trainer.max_epochs=30")
    cli("compress.py", f"ckpt_path={ckpt}", f"paths.data_dir={data}", "compress=[prune,quantize]",
        "compress.prune.ratio=0.5", "compress.quantize.max_drop=null", *COMPRESS_QUIET[1:],
        timeout=900)  # fmt: skip
    run, stages = _report(tmp_path / "logs")
    original, pruned, int8 = stages["original"], stages["prune"], stages["quantize"]
    assert pruned["params"] <= 0.5 * original["params"]
    assert int8["onnx"] and abs(int8["test/acc"] - pruned["test/acc"]) <= 0.06  # 1 of 19 graphs
    evaluated, exported = _eval_and_export(cli, tmp_path, run / "1_prune.ckpt", data)
    assert evaluated == pytest.approx(pruned["test/acc"], abs=1e-4)
    assert exported["formats"]["onnx"]["ok"], exported


def test_a_default_gnn_student_starts_from_its_teachers_strongest_channels():
    """compress=distill's default GNN student: the teacher's most important hidden channels,
    not a random start (a hidden-3 GCN on Cora from scratch: 84-98% of its teacher by seed).
    A student of another net (an MLP for a GCN) keeps its own start."""
    from litlab.compression.steps import Stage, inherit_channels

    torch.manual_seed(0)
    cfg = {"_target_": "litlab.domains.graph.nets.GNN", "in_channels": 12, "num_classes": 3}
    teacher_net = GNN(12, 3, hidden_channels=8, dropout=0.5)
    teacher = Stage(
        "original", torch.nn.Module(), {"model": {"net": {**cfg, "hidden_channels": 8}}}
    )
    teacher.model.net = teacher_net
    student = torch.nn.Module()
    student.net = GNN(12, 3, hidden_channels=3, dropout=0.2)
    run_cfg = {"model": {"net": {**cfg, "hidden_channels": 3, "dropout": 0.2}}}
    inherit_channels(teacher, student, run_cfg)
    first = teacher_net.state_dict()["convs.0.lin.weight"]
    rows = student.net.state_dict()["convs.0.lin.weight"]
    kept = [i for row in rows for i in range(8) if torch.equal(row, first[i])]
    assert len(set(kept)) == 3, kept  # three of the teacher's channels, as pruning picks them
    other = torch.nn.Module()
    other.net = GNN(12, 3, conv="mlp", hidden_channels=3)
    before = {k: v.clone() for k, v in other.net.state_dict().items()}
    mlp_cfg = {"model": {"net": {**cfg, "conv": "mlp", "hidden_channels": 3}}}
    inherit_channels(teacher, other, mlp_cfg)
    assert all(torch.equal(before[k], v) for k, v in other.net.state_dict().items())
