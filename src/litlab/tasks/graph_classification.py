"""Batches of graphs, a class per graph (MUTAG, PROTEINS, ENZYMES)."""

from litlab.tasks.kind import GRAPH_INPUTS, GRAPH_NOTES, TaskKind

KIND = TaskKind(
    name="graph_classification",
    metrics=("acc", "f1"),
    # mini-batches of graphs: x, edge_index and batch (the graph of each node)
    export_spec="litlab.export.domains:graph_spec",
    serve_output="graph_classes",
    inspect=("confusion", "embeddings", "histograms"),
    notes=GRAPH_NOTES,
    **GRAPH_INPUTS,
)
