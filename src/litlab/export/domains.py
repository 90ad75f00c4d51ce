"""What export needs to know per task kind (each kind names its builder here or in its own
adapter, `TaskKind.export_spec`): input names and dynamic axes, example and calibration
inputs preprocessed exactly as in training, the test split as (inputs, target) batches, and how
the task's metric is computed from a model's outputs (the module's own torchmetrics)."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice

import torch

from litlab import tasks

Predict = Callable[..., torch.Tensor]  # inputs (tensors, in input order) -> logits


@dataclass
class Spec:
    kind: str
    input_names: list[str]
    dynamic: dict  # {input: {axis: name or torch.export.Dim}}
    example: tuple  # export inputs (a batch of >= 2 where batched)
    held_out: list[tuple]  # verification inputs, from the test split (other sizes too)
    layout: dict  # shapes, dtypes, preprocessing: stored as metadata
    outputs: list[str]  # what each output column is (the kind's output family names them)
    test_batches: Callable[[], Iterator[tuple[tuple, object]]]  # (inputs, target)
    calibration: Callable[[int], Iterator[tuple]]  # up to n input tuples from the train split
    score: Callable[[Predict, tuple], torch.Tensor] = None  # metric input from one batch
    output_names: list[str] = field(default_factory=lambda: ["logits"])
    #: class probabilities of one batch (N, classes, ...) for the out-of-distribution score;
    #: None: `score` gives them (classifiers), or the kind's outputs carry no confidence
    probs: Callable[[Predict, tuple], torch.Tensor] | None = None


def output_names(run, dm, kind: str) -> list[str]:
    """The names of the net's output columns, as the task kind's output family gives them."""
    return tasks.get(kind).output_family().names(run.model, dm)


def _metric_input(kind: str):
    """predict, inputs -> what the kind's metrics take (probabilities, values)."""
    family = tasks.get(kind).output_family()
    return lambda predict, inputs: family.metric_input(predict(*inputs))


def spec_for(run) -> Spec:
    """The Spec of a LoadedRun (litlab.recipes.load.load_run), split set up: built by the
    function its task kind declares (`TaskKind.export_spec`)."""
    dm = run.datamodule
    kind = tasks.of(dm)
    if hasattr(dm, "setup"):
        dm.setup("test")
    return kind.hook("export_spec")(run, dm, kind.name)


#: the layout name of a batched tensor, by its number of dimensions
LAYOUTS = {2: "NF", 3: "NCL", 4: "NCHW", 5: "NCDHW"}


def tensor_spec(run, dm, kind) -> Spec:
    """Any net of one batched tensor (images, volumes, table rows): preprocessed as in
    training (the datamodule's own batch transfer), one row of outputs per sample (class
    scores, values: the kind's output family reads them)."""

    def batches(dataset):
        for x, y in dm.loader(dataset, train=False):  # no trainer: no augmentation
            yield dm.on_after_batch_transfer((x, y), 0)

    x, _ = next(batches(dm.test_set))
    layout = {
        "x": {
            "shape": ["batch", *x.shape[1:]],
            "dtype": "float32",
            "layout": LAYOUTS.get(x.dim(), f"{x.dim()}-d"),
        }
    }
    if hasattr(dm, "mean") and hasattr(dm, "std"):  # images normalized per channel
        layout["x"]["normalization"] = {
            "scale": "pixel / 255 (uint8) or as stored in [0, 1]",
            "mean": list(dm.mean),
            "std": list(dm.std),
        }
        layout["image_size"], layout["channels"] = dm.image_size, dm.channels
        if getattr(dm, "fit", None):  # how the service fits an image of another size
            layout["fit"] = dm.fit
    else:
        layout["x"]["normalization"] = getattr(
            dm, "normalization", "per-volume, per-channel z-score, fixed size"
        )
    if getattr(dm, "feature_names", None):  # table rows: what each column is
        layout["x"]["columns"] = [str(n) for n in dm.feature_names]
    return Spec(
        kind,
        ["x"],
        {"x": {0: "batch"}},
        (x[:2],),
        [(x[:1],), (x,)],
        layout,
        output_names(run, dm, kind),
        lambda: ((b[:1], b[1]) for b in batches(dm.test_set)),
        lambda k: ((b[0],) for b in islice(batches(dm.train_set), k)),
        _metric_input(kind),
    )


def segmentation_spec(run, dm, kind) -> Spec:
    """3D segmentation: patches in, logits out; whole volumes by sliding windows over the
    artifact (as the module does over the net). Spatial dims: any multiple of the stride."""
    from monai.inferers import sliding_window_inference

    model, patch = run.model, tuple(run.model.patch_size)
    h = model.hparams
    net = run.config.model.net  # a pruned net: its factory's settings are its base_kwargs
    stride = 2 ** len(net.get("strides") or net.get("base_kwargs", {}).get("strides", [2, 2, 2]))
    dims = {
        axis: stride * torch.export.Dim(f"{name}_over_{stride}", min=1)
        for axis, name in ((2, "depth"), (3, "height"), (4, "width"))
    }
    patches = [dm.train_set[i]["image"] for i in range(min(8, len(dm.train_set)))]
    example = (torch.stack(patches[:2]),)
    bigger = torch.nn.functional.pad(example[0][:1], (0, stride, 0, 0, 0, 2 * stride))

    def logits(predict, inputs):
        return sliding_window_inference(
            inputs[0],
            patch,
            h.sw_batch_size,
            lambda x: predict(x),
            overlap=h.sw_overlap,
            mode=h.sw_mode,
        )

    def score(predict, inputs):
        return logits(predict, inputs).argmax(1)

    def test_batches():
        for b in dm.loader(dm.test_set, train=False):
            yield (b["image"],), b["label"][:, 0]

    def calibration(k):
        for i in range(0, min(k * 2, len(dm.train_set)), 2):
            yield (
                torch.stack(
                    [dm.train_set[j]["image"] for j in (i, i + 1) if j < len(dm.train_set)]
                ),
            )

    layout = {
        "x": {
            "shape": ["batch", 1, "depth", "height", "width"],
            "dtype": "float32",
            "layout": "NCDHW",
            "spatial_multiple_of": stride,
            "normalization": "per-volume, per-channel z-score",
        },
        "patch_size": list(patch),
        "sliding_window": {"overlap": h.sw_overlap, "mode": h.sw_mode},
    }
    return Spec(
        kind,
        ["x"],
        {"x": {0: "batch", **dims}},
        example,
        [example, (bigger,)],
        layout,
        output_names(run, dm, kind),
        test_batches,
        calibration,
        score,
        probs=lambda predict, inputs: logits(predict, inputs).softmax(1),
    )


def _graph_inputs(data, graph_level: bool) -> tuple:
    inputs = (data.x.float(), data.edge_index)
    return inputs + (data.batch,) if graph_level else inputs


def node_spec(run, dm, kind) -> Spec:
    """One full graph: class scores per node; the test metric on the test mask."""
    data = dm.data
    half = data.subgraph(torch.arange(data.num_nodes // 2))  # other node and edge counts

    def score(predict, inputs):
        return predict(*inputs)[data.test_mask].softmax(1)

    layout = {
        "x": {"shape": ["nodes", data.num_features], "dtype": "float32"},
        "edge_index": {"shape": [2, "edges"], "dtype": "int64"},
        "output": "class scores per node",
    }
    inputs = _graph_inputs(data, False)
    return Spec(
        kind,
        ["x", "edge_index"],
        {"x": {0: "nodes"}, "edge_index": {1: "edges"}},
        inputs,
        [inputs, _graph_inputs(half, False)],
        layout,
        output_names(run, dm, kind),
        lambda: iter([(inputs, data.y[data.test_mask])]),
        lambda k: iter([inputs]),
        score,
    )


class SizedPooling(torch.nn.Module):
    """A graph-level GNN whose pooling is told the graph count. PyG's pooling otherwise calls
    `int(batch.max()) + 1`, a data-dependent Python int that torch.export cannot trace
    (pt2 and the dynamo ONNX exporter fail on it); as a symbolic size both export it."""

    def __init__(self, gnn: torch.nn.Module):
        super().__init__()
        self.gnn = gnn

    def forward(self, x, edge_index, batch):
        import functools

        graphs = batch.max().item() + 1
        from litlab.compat.torch import assume

        assume(graphs >= 1)
        pool = self.gnn.pool
        self.gnn.pool = functools.partial(pool, size=graphs)
        try:
            return self.gnn(x, edge_index, batch)
        finally:
            self.gnn.pool = pool


def graph_spec(run, dm, kind) -> Spec:
    """Mini-batches of graphs: x, edge_index and batch (graph id per node, sorted)."""

    def batches(dataset):
        for b in dm.loader(dataset, train=False):
            yield _graph_inputs(b, True), b.y.view(-1)

    first = next(batches(dm.test_set))[0]
    layout = {
        "x": {"shape": ["nodes", first[0].shape[1]], "dtype": "float32"},
        "edge_index": {"shape": [2, "edges"], "dtype": "int64"},
        "batch": {
            "shape": ["nodes"],
            "dtype": "int64",
            "meaning": "graph id of each node, 0..graphs-1, sorted",
        },
        "output": "class scores per graph",
    }
    small = next(batches(dm.test_set[:3]))[0]  # other node, edge and graph counts
    return Spec(
        kind,
        ["x", "edge_index", "batch"],
        {"x": {0: "nodes"}, "edge_index": {1: "edges"}, "batch": {0: "nodes"}},
        first,
        [first, small],
        layout,
        output_names(run, dm, kind),
        lambda: batches(dm.test_set),
        lambda k: (b[0] for b in islice(batches(dm.train_set), k)),
        _metric_input(kind),
    )
