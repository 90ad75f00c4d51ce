"""One graph, a class per node (Cora, CiteSeer, PubMed, SBM): transductive, masks pick the
nodes of each split."""

from litlab.tasks.kind import GRAPH_INPUTS, GRAPH_NOTES, TaskKind

KIND = TaskKind(
    name="node_classification",
    metrics=("acc", "f1"),
    # the whole graph at once (x, edge_index); scores on the split's mask
    export_spec="litlab.export.domains:node_spec",
    serve_output="node_classes",
    inspect=("samples", "confusion", "embeddings", "histograms"),
    samples_view="nodes",
    # one graph: no items to deal out to federated clients
    federated_labels=None,
    notes={
        **GRAPH_NOTES,
        "quantize": "graph inputs; compress=distill_graph makes a graph-free MLP",
        "federate": "the data is one graph",
    },
    **GRAPH_INPUTS,
)
