"""Graphs: node classification (SBM, Cora/CiteSeer/PubMed, Karate) and graph classification
(MUTAG, PROTEINS, ENZYMES); GCN, GAT, GraphSAGE, GIN and an MLP baseline."""

from litlab.domains import Domain, Template

DOMAIN = Domain(
    datamodules=(
        "data.SBMDataModule",
        "data.PlanetoidDataModule",
        "data.KarateDataModule",
        "tudataset.TUDataModule",
    ),
    modules=("module.GNNClassifier",),
    nets=("nets.gnn.GNN",),
    template=Template("data.SBMDataModule", "nets.gnn.GNN", "sbm", "gnn", "test/acc", 0.7, 60),
)
