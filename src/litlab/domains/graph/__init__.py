"""Graphs: node classification (SBM, Cora/CiteSeer/PubMed, Karate) and graph classification
(MUTAG, PROTEINS, ENZYMES); GCN, GAT, GraphSAGE, GIN and an MLP baseline."""
