"""Structured pruning of litlab's message-passing nets (`GNN`'s own `prune_plan`, `pruned`,
`copy_kept`: GCN, GAT, GraphSAGE, GIN, MLP). Torch-Pruning's dependency graph traces autograd
and loses the channels at PyG's gathers and scatters, so graph nets are pruned here by what the
net's own config says:
every hidden layer has `hidden_channels` outputs (GAT: heads x channels per head; GIN: its MLP's
inner width too), so pruning is a smaller `hidden_channels` and the kept channels copied over.
The pruned checkpoint stores a plain GNN config: eval.py, export and serve need nothing else.

Which channels stay: per channel group (a hidden layer's outputs, a GIN MLP's inner units),
the summed |w|^p of every weight that produces or reads it (the producing rows, the next
layer's and the classifier's columns, biases, norms, attention vectors): Torch-Pruning's group
magnitude importance. Residual nets tie the hidden layers to one set (their outputs add)."""

import re

import torch
from torch import nn

from litlab.errors import UserError

#: a GIN layer's inner MLP: (key suffix, role of dim 0, role of dim 1)
_GIN = {"nn.lins.0": ("inner", "prev"), "nn.lins.1": ("out", "inner"), "nn.norms.0": ("inner",)}
_STATS = ("running_mean", "running_var", "num_batches_tracked")


def _group(role: str, layer: int, tied: bool, output: int | None):
    """The channel group a (role, layer) dim belongs to (None: never pruned: the node
    features, the class scores of the output layer); residual nets share one for outputs."""
    if role == "prev":
        role, layer = "out", layer - 1
    if layer < 0 or (role in ("out", "inner") and layer == output):
        return None
    return ("out", "tied") if role == "out" and tied else (role, layer)


def _roles(key: str, tied: bool, output: int | None) -> list[tuple[int, object]]:
    """[(dim, group)] of a state-dict entry of the net (dims in other groups stay whole)."""
    if key.startswith("classifier."):
        return [(1, "pooled")] if key.endswith("weight") else []
    if norm := re.match(r"norms\.(\d+)\.", key):  # a hidden layer's norm: its channels
        return [(0, _group("out", int(norm[1]), tied, output))]
    m = re.fullmatch(r"convs\.(\d+)\.(?:(.+)\.)?(\w+)", key)
    if m is None:
        return []
    layer, path, leaf = int(m[1]), m[2] or "", m[3]
    for prefix, dims in _GIN.items():
        if path.startswith(prefix):
            dims = dims if leaf == "weight" else dims[:1]
            return [(d, _group(r, layer, tied, output)) for d, r in enumerate(dims)]
    if leaf in ("att_src", "att_dst"):
        return [(-1, ("heads", _group("out", layer, tied, output)))]
    if leaf == "eps":
        return []
    dims = ("out", "prev") if leaf == "weight" else ("out",)
    return [(d, _group(r, layer, tied, output)) for d, r in enumerate(dims)]


def _output(net) -> int | None:
    """The index of the layer whose outputs are the class scores (node level: the last)."""
    return len(net.convs) - 1 if net.node_level else None


def _importance(net: nn.Module, tied: bool, norm: int) -> dict:
    """{group: per-channel importance}; attention vectors add to their heads' channels."""
    scores: dict = {}
    for key, value in net.state_dict().items():
        if key.rsplit(".", 1)[-1] in _STATS:
            continue
        for dim, group in _roles(key, tied, _output(net)):
            if group is None or group == "pooled" or (group[0] == "heads" and group[1] is None):
                continue
            w = value.detach().abs().pow(norm)
            if group[0] == "heads":  # (1, heads, C): one score per flattened channel
                group, per = group[1], w.reshape(-1)
            else:
                per = w.movedim(dim, 0).reshape(w.shape[dim], -1).sum(1)
            scores[group] = scores[group] + per if group in scores else per.clone()
    return scores


def _keep(scores: torch.Tensor, width: int, heads: int) -> torch.Tensor:
    """The `width` best channels, the same count in each head (sorted, head by head)."""
    per_head = scores.reshape(heads, -1)
    top = per_head.topk(width // heads, dim=1).indices.sort(dim=1).values
    return (top + torch.arange(heads)[:, None] * per_head.shape[1]).reshape(-1)


def _pooled_index(net, kept: dict, tied: bool, in_channels: int, hidden: int) -> torch.Tensor:
    """Columns of the graph-level classifier: the node features (jumping knowledge `cat`,
    whole), then each pooled layer's kept channels."""
    out = [kept[_group("out", i, tied, None)] for i in range(len(net.convs))]
    if net.jk != "cat":
        return out[-1]
    parts = [torch.arange(in_channels)]
    parts += [idx + in_channels + i * hidden for i, idx in enumerate(out)]
    return torch.cat(parts)


def copy_kept(old: nn.Module, new: nn.Module, norm: int = 2) -> None:
    """Fill `new` (the same GNN with a smaller `hidden_channels`) with `old`'s most important
    channels: each changed dim of each tensor keeps its group's channels."""
    tied, output = bool(old.residual), _output(old)
    in_channels, hidden, width = in_features(old), hidden_width(old), hidden_width(new)
    heads = old.heads if old.conv_name == "gat" else 1
    scores = _importance(old, tied, norm)
    kept = {g: _keep(s, width, heads if g[0] == "out" else 1) for g, s in scores.items()}
    if not old.node_level:
        kept["pooled"] = _pooled_index(old, kept, tied, in_channels, hidden)
    target = new.state_dict()
    state = {}
    for key, value in old.state_dict().items():
        for dim, group in _roles(key, tied, output):
            if group is None or value.dim() == 0 or value.shape[dim] == target[key].shape[dim]:
                continue
            if group[0] == "heads":
                flat = value.reshape(*value.shape[:-2], -1)
                value = flat[..., kept[group[1]]].reshape(target[key].shape)
            else:
                value = value.index_select(dim, kept[group])
        state[key] = value
    new.load_state_dict(state)


def _first_weight(net) -> torch.Tensor:
    return next(v for k, v in net.state_dict().items() if k.startswith("convs.0.") and v.dim() == 2)


def in_features(net) -> int:
    return int(_first_weight(net).shape[1])


def hidden_width(net) -> int:
    """The net's hidden width: its first layer's outputs (all heads)."""
    return int(_first_weight(net).shape[0])


def target_width(hidden: int, count, ratio: float, heads: int, round_to, what: str, avoid=None):
    """The largest hidden width (a multiple of `heads` and of `round_to`; not `avoid`) whose
    net has at most `ratio` of the parameters; one line when even one channel per head has
    more."""
    total, step = count(hidden), heads * (round_to or 1)
    best = None
    for width in range(step, hidden, step):
        if width == avoid:
            continue
        if count(width) <= ratio * total:
            best = width
        else:
            break
    if best is None:
        least = count(step)
        raise UserError(
            f"compress.prune.ratio={ratio:g} would leave the {what}'s hidden layers without "
            f"channels: {step} channel(s) per layer ({heads} head(s)) already keep {least:,} of "
            f"its {total:,} parameters; valid: a ratio in [{least / total:.3f}, 1)"
            f"{'' if step < hidden else f' with hidden_channels above {step}'}"
        )
    return best


def prune_plan(net: nn.Module, net_cfg: dict, build, ratio: float, round_to) -> dict:
    """What pruning `net` to at most `ratio` of its parameters means: its hidden width now,
    the target width, the channel step (heads x round_to) and a width to avoid. One line for a
    net or ratio that cannot be pruned so (checked before anything is written)."""
    what = f"{net_cfg.get('conv', 'gcn')} net"
    if net.node_level and len(net.convs) < 2:
        raise UserError(
            f"compress.prune.method=structured: the {what} has one layer (num_layers=1), whose "
            "outputs are the classes: no hidden channels to prune"
        )
    hidden, heads = hidden_width(net), (net_cfg.get("heads", 1) if net.conv_name == "gat" else 1)
    if net.residual and in_features(net) == hidden:  # its first layer adds the node features
        raise UserError(
            f"compress.prune.method=structured: the {what} adds its {hidden} input features to "
            "its hidden layers (residual: true, hidden_channels = input features), which "
            "cannot lose channels; use compress.prune.method=unstructured"
        )

    def count(width: int) -> int:
        return sum(p.numel() for p in build(width).parameters())

    avoid = in_features(net) if net.residual else None  # a width that would add a residual
    target = target_width(hidden, count, ratio, heads, round_to, what, avoid)
    return {"hidden": hidden, "target": target, "step": heads * (round_to or 1), "avoid": avoid}


def prune(net: nn.Module, net_cfg: dict, build, ratio: float, steps: int, round_to, norm: int):
    """`net` pruned to at most `ratio` of its parameters in `steps` rounds (channels re-ranked
    after each); `build(width)` makes the same net with `hidden_channels=width`. Returns the
    pruned net and its width."""
    p = prune_plan(net, net_cfg, build, ratio, round_to)
    hidden, target, step = p["hidden"], p["target"], p["step"]
    done = set()
    for i in range(1, steps + 1):
        width = int(max(target, -(-(hidden - (hidden - target) * i / steps) // step) * step))
        width = target if width == p["avoid"] else width
        if width in done or width >= hidden_width(net):
            continue
        done.add(width)
        smaller = build(width)
        copy_kept(net, smaller, norm)
        net = smaller
    return net, target
