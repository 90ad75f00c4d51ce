"""Batches of graphs, a class per graph (MUTAG, PROTEINS, ENZYMES)."""

from litlab.tasks import GRAPH_CLASSIFICATION
from litlab.tasks.graphs import GraphInputs
from litlab.tasks.kind import Kind, register
from litlab.tasks.node_classification import GraphNets
from litlab.tasks.outputs import Classes


@register
class GraphClassification(GraphInputs, Classes, GraphNets, Kind):
    name = GRAPH_CLASSIFICATION
    metrics = ("acc", "f1")
    inspect = ("confusion", "embeddings", "histograms")
    # a PROTEINS client holds ~90 graphs, 3 steps of 32 an epoch: 20 rounds of 1 epoch left
    # GIN at the majority class, 5 epochs learn (docs/federated.md, BENCHMARKS.md)
    federated_local_epochs = 5
