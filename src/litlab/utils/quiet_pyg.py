"""Imported before torch_geometric by the graph modules: PyG's import uses torch.jit.script,
which torch 2.14 deprecates in a FutureWarning that is not the user's concern."""

import warnings

warnings.filterwarnings(
    "ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning
)
