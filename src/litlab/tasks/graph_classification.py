"""Batches of graphs, a class per graph (MUTAG, PROTEINS, ENZYMES)."""

from litlab.tasks.kind import GRAPH_NETS, GRAPH_NOTES, TaskKind

KIND = TaskKind(
    name="graph_classification",
    metrics=("acc", "f1"),
    # mini-batches of graphs: x, edge_index and batch (the graph of each node)
    export_spec="litlab.export.domains:graph_spec",
    inputs="litlab.tasks.inputs:Graphs",
    inspect=("confusion", "embeddings", "histograms"),
    # a PROTEINS client holds ~90 graphs, 3 steps of 32 an epoch: 20 rounds of 1 epoch left
    # GIN at the majority class, 5 epochs learn (docs/federated.md, BENCHMARKS.md)
    federated_local_epochs=5,
    # compress=quantize keeps an int8 file within 2% of the stage it quantized (its dense
    # layers only, as export's int8: the measured loss on Cora and MUTAG is 0.1 and 0 points)
    quantize_max_drop=0.02,
    notes=GRAPH_NOTES,
    **GRAPH_NETS,
)
