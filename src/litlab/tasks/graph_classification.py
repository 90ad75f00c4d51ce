"""Batches of graphs, a class per graph (MUTAG, PROTEINS, ENZYMES)."""

from litlab.tasks.kind import TaskKind

KIND = TaskKind(
    name="graph_classification",
    metrics=("acc", "f1"),
    export_spec="litlab.export.domains:graph_spec",
    inputs="graph",
    serve_output="graph_classes",
    serve_batchable=False,
    inspect=("confusion", "embeddings", "histograms"),
    compression=("prune_unstructured", "distill"),
    notes={
        "quantize": "graph inputs",
        "prune with compress.prune.method=structured": "graph inputs",
    },
)
