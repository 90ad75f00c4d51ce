"""The graph domain's nets: plain nn.Modules built from config plus the datamodule's dims.

Message-passing nets from PyG layers: GCN, GAT, GraphSAGE, GIN, and an MLP baseline that
ignores the edges. One class, so every option (depth, width, heads, dropout, norm, residual,
readout) works the same for each layer type.

- node classification: the last layer outputs the class scores (as in the GCN/GAT papers);
- graph classification: every layer is hidden; node states are pooled per graph (`readout`),
  from the last layer or from every layer concatenated (`jumping_knowledge: cat`, as in GIN),
  then one linear layer scores the classes.
"""

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from litlab.bounds import PosInt, Probability
from litlab.compat.torch import version_counter
from litlab.domains.graph import prune
from litlab.errors import UserError
from litlab.ops import TiledLinear, tile_linears

# isort: split
from torch_geometric.nn import MLP as PygMLP
from torch_geometric.nn import (
    GATConv,
    GCNConv,
    GINConv,
    SAGEConv,
    global_add_pool,
    global_max_pool,
    global_mean_pool,
)
from torch_geometric.nn.dense.linear import Linear as PygLinear
from torch_geometric.nn.resolver import activation_resolver, normalization_resolver

from litlab import tasks
from litlab.tasks import NODE_CLASSIFICATION

CONVS = ("gcn", "gat", "sage", "gin", "mlp")
READOUTS = {"sum": global_add_pool, "mean": global_mean_pool, "max": global_max_pool}


class _Linear(nn.Linear):
    """A layer of the MLP baseline: same call as a conv, the edges are ignored."""

    def forward(self, x, edge_index=None):
        return super().forward(x)


class _TiledLinear(TiledLinear):
    """The same through litlab's custom op (`linear_impl=tiled`)."""

    def forward(self, x, edge_index=None):
        return super().forward(x)


class _GATConv(GATConv):
    """PyG's GATConv plus dropout on the values: the projected features that the attention
    coefficients average. The GAT authors' code (`attn_head` in utils/layers.py) drops them
    (p = the input dropout) after computing the coefficients from them, undropped; PyG has no
    option for it. One mask per node, feature and head, as there; nothing changes in eval."""

    def __init__(self, *args, value_dropout: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.value_dropout = value_dropout

    def propagate(self, edge_index, x, **kwargs):
        # GATConv.forward has computed the coefficients' scores from x = (x_src, x_dst) already
        if self.training and self.value_dropout > 0.0:
            x = (F.dropout(x[0], self.value_dropout, True), x[1])
        return super().propagate(edge_index, x=x, **kwargs)


_NONZERO_CACHE: list = []  # (tensor kept alive, its version, its positions), newest first
_NONZERO_CACHE_SIZE = 4  # a few graphs in turn (train/test graphs, two models) still hit


def _nonzero(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x's non-zero positions, remembered for the last few tensors seen: a full graph's features
    are the same unmodified tensor at every step (checked by identity and version counter)."""
    for i, (seen, version, positions) in enumerate(_NONZERO_CACHE):
        if seen is x and version == version_counter(x):
            _NONZERO_CACHE.insert(0, _NONZERO_CACHE.pop(i))
            return positions
    positions = x.nonzero(as_tuple=True)
    _NONZERO_CACHE.insert(0, (x, version_counter(x), positions))
    del _NONZERO_CACHE[_NONZERO_CACHE_SIZE:]
    return positions


def feature_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout that draws random numbers only for the non-zero entries when the features are
    sparse (bag-of-words: 1% of Cora's entries), as in the GCN paper's code. Same distribution as
    `F.dropout` (dropping a zero changes nothing), and 20x cheaper on such inputs on CPU."""
    if not training or p == 0.0:
        return x
    nonzero = _nonzero(x)
    if len(nonzero[0]) > x.numel() // 4:
        return F.dropout(x, p, training)
    keep = torch.rand(len(nonzero[0]), device=x.device) >= p
    rows, cols = nonzero[0][keep], nonzero[1][keep]
    out = torch.zeros_like(x)
    out[rows, cols] = x[rows, cols] / (1.0 - p)
    return out


class GNN(nn.Module):
    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        conv: Literal["gcn", "gat", "sage", "gin", "mlp"] = "gcn",
        hidden_channels: PosInt = 16,
        num_layers: PosInt = 2,
        heads: PosInt = 1,
        output_heads: PosInt = 1,
        dropout: Probability = 0.5,
        input_dropout: Probability | None = None,
        attention_dropout: Probability = 0.0,
        value_dropout: Probability = 0.0,
        act: str = "relu",
        norm: str | None = None,
        residual: bool = False,
        kind: str = NODE_CLASSIFICATION,
        readout: Literal["sum", "mean", "max"] = "sum",
        jumping_knowledge: Literal["last", "cat"] = "last",
        readout_dropout: Probability | None = None,
        cached: bool = True,
        linear_impl: Literal["torch", "tiled"] = "torch",
    ):
        """`hidden_channels` is a layer's total width (GAT: heads x channels per head);
        `input_dropout`/`readout_dropout` default to `dropout`; `value_dropout` (GAT): on the
        projected features the attention averages, as the GAT authors' code does; `cached` keeps GCN's normalized
        adjacency between steps (node classification only: the graph never changes);
        `linear_impl=tiled`: every dense product (the convs' weights, the MLPs, the classifier)
        through litlab's custom op (docs/ops.md), same parameters; aggregation stays PyG's."""
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"conv={conv} is not one of {CONVS}")
        if readout not in READOUTS or jumping_knowledge not in ("last", "cat"):
            raise ValueError(f"readout must be one of {list(READOUTS)}, jumping_knowledge last|cat")
        self.node_level = not tasks.get(kind).graph_level  # else: pooled per graph
        self.conv_name, self.heads, self.output_heads = conv, heads, output_heads
        self.attention_dropout, self.cached = attention_dropout, cached and self.node_level
        self.value_dropout = value_dropout
        self.dropout = dropout
        self.input_dropout = dropout if input_dropout is None else input_dropout
        self.readout_dropout = dropout if readout_dropout is None else readout_dropout
        self.residual, self.jk = residual, jumping_knowledge
        self.pool = READOUTS[readout]
        self.act = activation_resolver(act)
        self.tiled = linear_impl == "tiled"

        widths = [in_channels] + [hidden_channels] * num_layers
        if self.node_level:
            widths[-1] = num_classes
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i in range(num_layers):
            last = self.node_level and i == num_layers - 1
            self.convs.append(self._conv(widths[i], widths[i + 1], last))
            self.norms.append(
                nn.Identity()
                if last or norm is None
                else normalization_resolver(norm, widths[i + 1])
            )
        if not self.node_level:
            pooled = sum(widths) if jumping_knowledge == "cat" else hidden_channels
            self.classifier = nn.Linear(pooled, num_classes)
        if linear_impl == "tiled":
            tile_linears(self, (nn.Linear, PygLinear))

    @classmethod
    def check_settings(cls, s: dict, key: str) -> None:
        for name, what, resolve, examples in (
            ("act", "an activation", activation_resolver, "relu, elu, gelu"),
            ("norm", "a normalization", normalization_resolver, "batch_norm, layer_norm"),
        ):
            if s.get(name) is not None:
                try:
                    resolve(s[name], **({"in_channels": 8} if name == "norm" else {}))
                except (ValueError, KeyError, TypeError):
                    raise UserError(
                        f"{key}.{name}={s[name]} is not {what} PyG knows; e.g. {examples}"
                    ) from None
        if s["conv"] == "gat" and s["num_layers"] > 1 and s["hidden_channels"] % s["heads"]:
            raise UserError(
                f"{key}.hidden_channels={s['hidden_channels']} is not a multiple of "
                f"{key}.heads={s['heads']} (GAT splits the width between heads)"
            )

    def _conv(self, n_in: int, n_out: int, last: bool) -> nn.Module:
        name = self.conv_name
        if name == "gcn":
            return GCNConv(n_in, n_out, cached=self.cached)
        if name == "sage":
            return SAGEConv(n_in, n_out)
        if name == "gin":  # a 2-layer MLP with batch norm per layer (GIN-0, Xu et al.)
            return GINConv(PygMLP([n_in, n_out, n_out], norm=None if last else "batch_norm"))
        if name == "gat":
            heads = self.output_heads if last else self.heads
            if not last and n_out % heads:
                raise ValueError(f"hidden_channels={n_out} is not a multiple of heads={heads}")
            return _GATConv(
                n_in,
                n_out if last else n_out // heads,
                heads=heads,
                concat=not last,
                dropout=self.attention_dropout,
                value_dropout=self.value_dropout,
            )
        return (_TiledLinear if self.tiled else _Linear)(n_in, n_out)

    @staticmethod
    def narrowed(net: dict, scale: float) -> dict:
        """compress=distill's default student: `scale` times the hidden width, a multiple of
        the attention heads (GAT: heads x channels per head)."""
        heads = net.get("heads", 1) if net.get("conv") == "gat" else 1
        per_head = max(1, round(net.get("hidden_channels", 16) * scale / heads))
        # dropout 0.5 on a few hidden units drops most of them: at most 0.2 on a narrowed GNN
        return {"hidden_channels": per_head * heads, "dropout": min(net.get("dropout", 0.0), 0.2)}

    # compress.prune.method=structured: a smaller hidden width holding the most important
    # channels (prune.py; Torch-Pruning's trace does not follow PyG's message passing), and
    # `copy_kept(new)`: `new` (this GNN, narrower) filled with this one's most important ones
    prune_plan = prune.prune_plan
    pruned = prune.prune
    copy_kept = prune.copy_kept

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Class scores per node (node classification) or per graph (given `batch`)."""
        states = [x]
        # one full graph at every step: its non-zero positions are cached; new batches each step
        # (graph classification) would only pay nonzero() on top of dropout
        h = (
            feature_dropout(x, self.input_dropout, self.training)
            if self.node_level
            else F.dropout(x, self.input_dropout, self.training)
        )
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            if i > 0:
                h = F.dropout(h, self.dropout, self.training)
            out = conv(h, edge_index)
            if self.node_level and i == len(self.convs) - 1:
                return out
            out = self.act(norm(out))
            h = out + h if self.residual and out.shape == h.shape else out
            states.append(h)
        if batch is None:
            batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        used = states if self.jk == "cat" else states[-1:]
        pooled = torch.cat([self.pool(s, batch) for s in used], dim=1)
        return self.classifier(F.dropout(pooled, self.readout_dropout, self.training))
