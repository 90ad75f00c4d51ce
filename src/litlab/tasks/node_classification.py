"""One graph, a class per node (Cora, CiteSeer, PubMed, SBM): transductive, masks pick the
nodes of each split."""

from litlab.tasks.kind import TaskKind

KIND = TaskKind(
    name="node_classification",
    metrics=("acc", "f1"),
    export_spec="litlab.export.domains:node_spec",
    inputs="graph",
    serve_output="node_classes",
    serve_batchable=False,
    inspect=("samples", "confusion", "embeddings", "histograms"),
    samples_view="nodes",
    compression=("prune_unstructured", "distill"),
    federated_labels=None,
    notes={
        "quantize": "graph inputs; compress=distill_graph makes a graph-free MLP",
        "prune with compress.prune.method=structured": "graph inputs",
        "federate": "the data is one graph",
    },
)
