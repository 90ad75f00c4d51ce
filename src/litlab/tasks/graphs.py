"""The graph kinds and their input mixins: one graph, a class per node (`NodeInputs`), and
batches of graphs, a class per graph (`GraphInputs`). Served as JSON (node features `x`, `edge_index`,
and `batch`, each node's graph); exported with their dynamic node, edge and graph counts.
torch and PyG are imported where used."""

from itertools import islice

from litlab.tasks import GRAPH_CLASSIFICATION, NODE_CLASSIFICATION, checks
from litlab.tasks.figures import NodeAccuracy
from litlab.tasks.kind import Classes, Kind, Spec, register_kind
from litlab.tasks.tensors import FLOAT, INT64, TensorInputs
from litlab.tasks.units import ItemUnits, NodeUnits


class NodeInputs:
    """One graph as JSON (node features `x`, `edge_index`), a class per node; the test metric
    on the test mask."""

    batched_tensor = False
    batchable = False
    background = False
    json_words = "x, edge_index"
    units = NodeUnits()
    #: the net pools its nodes into one answer per graph (the answer's `level`)
    graph_level = False

    @property
    def level(self) -> str:
        return "graph" if self.graph_level else "node"

    def expected_inputs(self, layout: dict) -> list[tuple[str, str, list]]:
        out = [("x", FLOAT, layout["x"]["shape"]), ("edge_index", INT64, [2, "edges"])]
        return out + ([("batch", INT64, ["nodes"])] if self.graph_level else [])

    def check_inputs(self, inputs: dict) -> None:
        shape = checks.listed(inputs["x"].get("shape"), "inputs.x.shape", 2)
        checks.integer(shape[1], "inputs.x.shape[1] (node features)", 1, checks.MAX_FEATURES)

    def zeros(self, layout: dict, items: int) -> tuple:
        """Two nodes (one edge), in `items` graphs where graphs are batched."""
        import numpy as np

        feats = layout["x"]["shape"][1]
        args = (np.zeros((2, feats), np.float32), np.zeros((2, 1), np.int64))
        return args + ((np.asarray([0, items - 1], np.int64),) if self.graph_level else ())

    def decode(self, data: dict, features: int, max_nodes: int) -> tuple:
        """{"x": nodes x features, "edge_index": [sources, targets], "batch": graph ids}."""
        import numpy as np

        BadRequest = checks.BadRequest
        for key in ("x", "edge_index"):
            if key not in data:
                optional = ", optional batch" if self.graph_level else ""
                raise BadRequest(
                    f"The JSON body needs '{key}' (and 'x', 'edge_index'{optional}).", 422
                )
        x = checks.array(data["x"], "x", np.float32, 2)
        checks.count(len(x), max_nodes, "nodes")
        if x.shape[1] != features:
            raise BadRequest(f"'x' must have {features} features per node, not {x.shape[1]}.", 422)
        edges = data["edge_index"]
        edges = (
            checks.array(edges, "edge_index", np.int64, 2) if edges else np.zeros((2, 0), np.int64)
        )
        if edges.shape[0] != 2:
            raise BadRequest("'edge_index' must have 2 rows (sources, targets).", 422)
        if edges.size and (edges.min() < 0 or edges.max() >= len(x)):
            raise BadRequest(f"'edge_index' refers to nodes outside 0..{len(x) - 1}.", 422)
        if not self.graph_level:
            return x, edges
        batch = data.get("batch")
        batch = (
            np.zeros(len(x), np.int64)
            if batch is None
            else checks.array(batch, "batch", np.int64, 1)
        )
        if len(batch) != len(x) or batch.min() < 0 or (np.diff(batch) < 0).any():
            raise BadRequest("'batch' must give each node's graph id, sorted, from 0.", 422)
        if len(np.unique(batch)) != batch.max() + 1:
            raise BadRequest("'batch' must number the graphs 0, 1, 2, ... without gaps.", 422)
        return x, edges, batch

    async def json(self, predictor, data: dict) -> dict:
        runner = predictor.runner
        args = self.decode(data, predictor.channels, max_nodes=predictor.max_batch * 10_000)
        out = runner.answer(await predictor.offload(runner.run, *args))
        return {"level": self.level, **out}

    uploads = TensorInputs.uploads  # JSON only: a 415 naming `json_words`

    async def warm_up(self, predictor) -> None:
        graph = {"x": [[0.0] * predictor.channels] * 3, "edge_index": [[0, 1], [1, 2]]}
        await self.json(predictor, graph)

    patches = TensorInputs.patches

    def ood_inputs(self, spec) -> list:
        return []  # graphs: the classifier's confidence alone

    def graph_inputs(self, data) -> tuple:
        inputs = (data.x.float(), data.edge_index)
        return inputs + (data.batch,) if self.graph_level else inputs

    def layout(self, features: int) -> dict:
        layout = {
            "x": {"shape": ["nodes", features], "dtype": "float32"},
            "edge_index": {"shape": [2, "edges"], "dtype": "int64"},
            "output": f"class scores per {self.level}",
        }
        if self.graph_level:
            meaning = "graph id of each node, 0..graphs-1, sorted"
            layout["batch"] = {"shape": ["nodes"], "dtype": "int64", "meaning": meaning}
        return layout

    def export_spec(self, run) -> Spec:
        """One full graph: class scores per node; the test metric on the test mask."""
        import torch

        dm = run.datamodule
        dm.setup("test")
        data = dm.data
        half = data.subgraph(torch.arange(data.num_nodes // 2))  # other node and edge counts
        inputs = self.graph_inputs(data)
        return Spec(
            self.name, ["x", "edge_index"], {"x": {0: "nodes"}, "edge_index": {1: "edges"}},
            inputs, [inputs, self.graph_inputs(half)], self.layout(data.num_features),
            self.names(run.model, dm), lambda: iter([(inputs, data.y[data.test_mask])]),
            lambda k: iter([inputs]),
            lambda predict, inputs: predict(*inputs)[data.test_mask].softmax(1),
        )  # fmt: skip


class GraphInputs(NodeInputs):
    """Mini-batches of graphs: x, edge_index and batch (graph id per node, sorted); JSON of one
    graph without `batch`. Federated clients hold whole graphs."""

    graph_level = True
    units = ItemUnits()

    def export_net(self, net):
        return sized_pooling(net)

    def export_spec(self, run) -> Spec:
        dm = run.datamodule
        dm.setup("test")

        def batches(dataset):
            for b in dm.loader(dataset, train=False):
                yield self.graph_inputs(b), b.y.view(-1)

        first = next(batches(dm.test_set))[0]
        small = next(batches(dm.test_set[:3]))[0]  # other node, edge and graph counts
        dynamic = {"x": {0: "nodes"}, "edge_index": {1: "edges"}, "batch": {0: "nodes"}}
        return Spec(
            self.name, ["x", "edge_index", "batch"], dynamic, first, [first, small],
            self.layout(first[0].shape[1]), self.names(run.model, dm),
            lambda: batches(dm.test_set),
            lambda k: (b[0] for b in islice(batches(dm.train_set), k)),
            lambda predict, inputs: self.metric_input(predict(*inputs)),
        )  # fmt: skip


class GraphNets:
    """What the graph kinds share: how their nets compress. Structured pruning is the GNN's own
    (smaller hidden widths: Torch-Pruning's traced dependency graph does not follow PyG's
    message passing); int8 quantizes the dense layers only: the message passing around them
    (gathers, scatters, degree norms) carries indices and per-node sums whose ranges calibrate
    to zero scales (NaN outputs) and whose rounding costs accuracy for no size or speed.
    compress=quantize keeps an int8 file within 2% of the stage it quantized (the measured
    loss on Cora and MUTAG is 0.1 and 0 points)."""

    int8_op_types = ("Gemm", "MatMul")
    quantize_max_drop = 0.02


@register_kind
class NodeClassification(NodeInputs, Classes, GraphNets, Kind):
    """One graph, a class per node (Cora, CiteSeer, PubMed, SBM): transductive, masks pick
    the nodes of each split."""

    name = NODE_CLASSIFICATION
    metrics = ("acc", "f1")
    inspect = ("samples", "confusion", "embeddings", "histograms")
    samples_figure = NodeAccuracy
    # an epoch is one full-graph step (a GCN trains 200 centrally)
    federated_local_epochs = 20
    # one full-graph step per epoch: 5 steps teach a student nothing
    compress_epochs = 400
    # a GCN's logits on Cora are small (weight decay, dropout): at T=4 its soft labels are near
    # uniform and a small student learns little (GCN teacher 0.796: hidden-3 student 0.67 at
    # T=4, 0.76 at T=1, 400 epochs)
    distill_temperature = 1.0
    # one full-graph step per epoch, and a narrow student learns slowly: the hidden-3 student
    # of that teacher, started from the teacher's 3 most important hidden channels
    # (compression.steps.inherit_channels), kept 96.0, 97.0, 95.2 and 97.5% of its test
    # accuracy at seeds 1-4 with 5x the teacher's lr 0.01 (1x: 94.6, 93.1%; 10x: 98.4, 95.0,
    # 94.6, 96.0%), in 400 epochs
    distill_lr_factor = 5.0


@register_kind
class GraphClassification(GraphInputs, Classes, GraphNets, Kind):
    """Batches of graphs, a class per graph (MUTAG, PROTEINS, ENZYMES)."""

    name = GRAPH_CLASSIFICATION
    metrics = ("acc", "f1")
    inspect = ("confusion", "embeddings", "histograms")
    # a PROTEINS client holds ~90 graphs, 3 steps of 32 an epoch: 20 rounds of 1 epoch left
    # GIN at the majority class, 5 epochs learn (docs/federated.md, BENCHMARKS.md)
    federated_local_epochs = 5


def sized_pooling(gnn):
    """A graph-level GNN whose pooling is told the graph count. PyG's pooling otherwise calls
    `int(batch.max()) + 1`, a data-dependent Python int that torch.export cannot trace (pt2
    and the dynamo ONNX exporter fail on it); as a symbolic size both export it."""
    import functools

    import torch

    from litlab.compat.torch import assume

    class SizedPooling(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gnn = gnn

        def forward(self, x, edge_index, batch):
            graphs = batch.max().item() + 1
            assume(graphs >= 1)
            pool = self.gnn.pool
            self.gnn.pool = functools.partial(pool, size=graphs)
            try:
                return self.gnn(x, edge_index, batch)
            finally:
                self.gnn.pool = pool

    return SizedPooling().eval()
