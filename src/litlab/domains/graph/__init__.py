"""Graphs: node classification (SBM, Cora/CiteSeer/PubMed, Karate) and graph classification
(MUTAG, PROTEINS, ENZYMES); GCN, GAT, GraphSAGE, GIN and an MLP baseline.

Every module of this folder is imported after this file, so the filter below comes before
torch_geometric's import: PyG's import uses torch.jit.script, which torch 2.14 deprecates in a
FutureWarning that is not the user's concern."""

import warnings

from litlab.domains import Domain, Template

warnings.filterwarnings(
    "ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning
)

DOMAIN = Domain(
    datamodules=(
        "data.SBMDataModule",
        "data.PlanetoidDataModule",
        "data.KarateDataModule",
        "data.TUDataModule",
    ),
    modules=("module.GNNClassifier",),
    nets=("nets.GNN",),
    template=Template("data.SBMDataModule", "nets.GNN", "sbm", "gnn", "test/acc", 0.7, 60),
)
