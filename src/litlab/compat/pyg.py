"""PyG internals litlab uses (checked against torch_geometric 2.8.1).

- `GCNConv._cached_edge_index` / `_cached_adj_t`: the normalised adjacency a `cached=True`
  convolution keeps; dropped before export, or the training graph would be baked into the
  file as a constant (export/recipe.prepare_net).
"""

CHECKED_WITH = "2.8.1"


def _fail(what: str):
    import torch_geometric

    from litlab.compat import missing

    return missing("torch_geometric", CHECKED_WITH, torch_geometric.__version__, what)


def drop_cached_graph(conv) -> None:
    """The convolution computes its normalisation from each call's graph from now on."""
    conv.cached, conv._cached_edge_index, conv._cached_adj_t = False, None, None


def check_pyg() -> None:
    from torch_geometric.nn import GCNConv

    conv = GCNConv(2, 2, cached=True)
    if not (hasattr(conv, "_cached_edge_index") and hasattr(conv, "_cached_adj_t")):
        raise _fail("GCNConv._cached_edge_index / _cached_adj_t")
