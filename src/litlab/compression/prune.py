"""Pruning. Structured (Torch-Pruning): whole channels go, so tensors shrink and the net gets
smaller and faster. Unstructured (Lightning's ModelPruning): single weights are zeroed; the
tensors keep their shapes, so the file and the dense kernels stay as big and as slow.

Rebuild a structurally pruned net from config, so eval.py, export and resume need nothing
but the checkpoint: the pruned run config names the original net factory and the new shapes
of the layers pruning changed, and `resized_net` builds the original, then resizes them.

    net: {_target_: litlab.compression.prune.resized_net, base_target: <original factory>,
          base_kwargs: {...}, shapes: {"layer1.0.conv1": [in, out, groups], "bn1": [n], ...}}"""

import copy
import inspect
import math

import torch
from torch import nn

from litlab.compat.torch import resizable_bases
from litlab.compat.torch_pruning import first_known_channels, group_root
from litlab.errors import UserError

# every convolution's base (transposed too), every batch and instance norm's
_ConvNd, _NormBase = resizable_bases()


def count_parameters(net: nn.Module) -> tuple[int, int]:
    """(parameters, non-zero parameters) of a net."""
    params = list(net.parameters())
    return sum(p.numel() for p in params), sum(int(p.count_nonzero()) for p in params)


def _heads(net: nn.Module, num_classes: int | None) -> list[nn.Module]:
    """The output layers (their outputs are the classes): never pruned."""
    layers = [m for m in net.modules() if isinstance(m, (nn.Linear, _ConvNd))]
    heads = [m for m in layers if (shape_of(m) or [0, 0])[1] == num_classes]
    return heads or layers[-1:]


def _pruner(
    net, example_inputs, channel_ratio: float, steps: int, round_to, norm: int, num_classes
):
    import torch_pruning as tp

    return tp.pruner.MetaPruner(
        net,
        example_inputs,
        importance=tp.importance.GroupMagnitudeImportance(p=norm),
        pruning_ratio=channel_ratio,
        iterative_steps=steps,
        round_to=round_to,
        ignored_layers=_heads(net, num_classes),
    )


def most_channels(net: nn.Module, round_to: int | None, num_classes) -> float:
    """The largest share of channels a layer may lose and keep one (or `round_to`): past it
    Torch-Pruning skips a layer it would empty (so the net keeps more than asked), or, with
    `round_to` above a layer's width, empties it."""
    heads = set(_heads(net, num_classes))
    widths = {
        name: shape_of(m)[1]
        for name, m in net.named_modules()
        if isinstance(m, (nn.Linear, _ConvNd)) and m not in heads
    }
    keep = round_to or 1
    narrowest = min(widths, key=widths.get, default=None)
    if narrowest is not None and widths[narrowest] < keep:
        raise UserError(
            f"compress.prune.round_to={round_to} would leave layer {narrowest} without channels "
            f"(it has {widths[narrowest]}); valid: a round_to of at most {widths[narrowest]}"
        )
    return max(0.0, 1 - keep * (1 + 1e-6) / widths[narrowest]) if narrowest else 0.0


def _channel_ratio(net, example_inputs, ratio: float, round_to, norm, num_classes) -> float:
    """The share of channels to remove per layer so that at most `ratio` of the parameters
    remain: parameters shrink about quadratically in channels, so it is searched (bisection on
    throw-away copies; the count does not depend on which channels go, only on how many)."""
    total = count_parameters(net)[0]
    lo, hi = 0.0, most_channels(net, round_to, num_classes)
    for _ in range(12):
        mid = (lo + hi) / 2
        trial = copy.deepcopy(net)
        _pruner(trial, example_inputs, mid, 1, round_to, norm, num_classes).step()
        lo, hi = (mid, hi) if count_parameters(trial)[0] > ratio * total else (lo, mid)
    return hi


def smallest_share(net, example_inputs, round_to=None, norm: int = 2, num_classes=None) -> float:
    """The smallest share of its parameters structured pruning can leave `net` with: every
    prunable layer down to its last channel (or `round_to` of them), on a throw-away copy."""
    most = most_channels(net, round_to, num_classes)
    trial = copy.deepcopy(net).eval()
    with first_known_channels():
        _pruner(trial, example_inputs, most, 1, round_to, norm, num_classes).step()
    return count_parameters(trial)[0] / count_parameters(net)[0]


def check_reachable(net, example_inputs, ratio: float, round_to, norm, num_classes) -> None:
    """One line when `ratio` would leave layers without channels: below the smallest share
    that keeps a channel (or `round_to`) in every layer, the search would stop there and
    keep more parameters than asked."""
    floor = smallest_share(net, example_inputs, round_to, norm, num_classes)
    if ratio < floor:
        per_layer = f"{round_to} channels" if round_to else "one channel"
        raise UserError(
            f"compress.prune.ratio={ratio:g} would leave layers of this net without channels: "
            f"keeping {per_layer} in each leaves {floor:.2%} of its parameters; valid: a ratio "
            f"in [{math.ceil(floor * 1000) / 1000:g}, 1)"
            + (" or a smaller compress.prune.round_to" if round_to else "")
        )


def structured(
    net: nn.Module,
    example_inputs,
    ratio: float,
    steps: int = 5,
    round_to: int | None = None,
    norm: int = 2,
    num_classes: int | None = None,
) -> dict[str, list[int]]:
    """Prune `net` in place, in `steps` rounds, to at most `ratio` of its parameters; returns
    the changed layer shapes (what `resized_net` needs to rebuild it)."""
    before = all_shapes(net)
    was_training = net.training
    net.eval()  # the dependency graph traces a forward; BN statistics must not move
    # (no torch.no_grad: the dependency graph is traced through autograd)
    with first_known_channels():  # the channels of a U-Net's concatenated skip connections
        channel_ratio = _channel_ratio(net, example_inputs, ratio, round_to, norm, num_classes)
        pruner = _pruner(net, example_inputs, channel_ratio, steps, round_to, norm, num_classes)
        for _ in range(steps):
            pruner.step()
    net.train(was_training)
    return changed_shapes(before, net)


def copy_kept_channels(
    teacher: nn.Module, student: nn.Module, example_inputs, norm: int = 2
) -> bool:
    """Fill `student` (the teacher's net with fewer channels per layer) with the teacher's most
    important channels: each channel group Torch-Pruning couples keeps the channels of largest
    L`norm` magnitude, as many as the student's layer of the same name has. False, and
    `student` untouched, where the shapes do not match or Torch-Pruning cannot trace the net."""
    net = copy.deepcopy(teacher).eval()  # traced, not trained: no statistics move
    widths = {name: shape_of(m) for name, m in student.named_modules()}
    try:
        _prune_to(net, widths, example_inputs, norm)
    except Exception:  # noqa: BLE001 (a net it cannot trace: the student keeps its own start)
        return False
    if _tensor_shapes(net) != _tensor_shapes(student):
        return False
    student.load_state_dict(net.state_dict())
    return True


def _prune_to(net: nn.Module, widths: dict, example_inputs, norm: int) -> None:
    """Prune `net` in place until each layer has the output channels `widths` names for it."""
    import torch
    import torch_pruning as tp

    names = {m: name for name, m in net.named_modules()}
    importance = tp.importance.GroupMagnitudeImportance(p=norm)
    with first_known_channels():  # a U-Net's concatenated skip connections
        graph = tp.DependencyGraph().build_dependency(net, example_inputs)
        for group in graph.get_all_groups():
            root = group_root(group)
            have, want = shape_of(root), widths.get(names[root])
            if want is None or len(want) != len(have) or want[1] >= have[1]:
                continue
            order = torch.argsort(importance(group))  # least important first
            group.prune(idxs=order[: have[1] - want[1]].tolist())


def pruned_net_config(net_cfg: dict, shapes: dict[str, list[int]]) -> dict:
    """The stored net config of a pruned net: the original factory plus the new shapes."""
    if net_cfg.get("_target_") == "litlab.compression.prune.resized_net":  # pruned twice
        return {**net_cfg, "shapes": {**net_cfg["shapes"], **shapes}}
    kwargs = {k: v for k, v in net_cfg.items() if k != "_target_"}
    return {
        "_target_": "litlab.compression.prune.resized_net",
        "base_target": net_cfg["_target_"],
        "base_kwargs": kwargs,
        "shapes": shapes,
    }


def _tensor_shapes(net: nn.Module) -> dict[str, tuple]:
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def check_rebuilds(net: nn.Module, rebuilt: nn.Module) -> None:
    """The net rebuilt from config must have the pruned net's tensor shapes exactly."""
    want, got = _tensor_shapes(net), _tensor_shapes(rebuilt)
    if want != got:
        bad = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        raise UserError(
            f"the pruned net cannot be rebuilt from its config (layers other than "
            f"Conv/Linear/BatchNorm changed shape: {', '.join(bad[:4])})"
        )


def unstructured_callback(ratio: float, epochs: int):
    """Lightning's ModelPruning: global L1 magnitude pruning of the weights at the end of each
    epoch but the last, which fine-tunes with the final `1 - ratio` zeros; then made
    permanent (masks folded into the weights)."""
    from lightning.pytorch.callbacks import ModelPruning

    rounds = max(epochs - 1, 1)
    per_round = 1 - ratio ** (1 / rounds)  # share of the remaining weights, each round
    return ModelPruning(
        "l1_unstructured",
        amount=per_round,
        use_global_unstructured=True,
        apply_pruning=lambda epoch: epoch < rounds,
        parameter_names=["weight"],
        make_pruning_permanent=True,
        verbose=0,
    )


# ---------------------------------------------------------------- resize
def shape_of(module: nn.Module) -> list[int] | None:
    """The sizes that structured pruning changes in a layer (None: not a resizable layer)."""
    if isinstance(module, _ConvNd):  # transposed too (a U-Net's up path)
        return [module.in_channels, module.out_channels, module.groups]
    if isinstance(module, nn.Linear):
        return [module.in_features, module.out_features]
    if isinstance(module, _NormBase):
        return [module.num_features]
    return None


def changed_shapes(before: dict[str, list[int]], net: nn.Module) -> dict[str, list[int]]:
    """{layer name: new shape} of the layers whose shape differs from `before`."""
    return {name: shape for name, shape in all_shapes(net).items() if shape != before.get(name)}


def all_shapes(net: nn.Module) -> dict[str, list[int]]:
    return {name: shape_of(m) for name, m in net.named_modules() if shape_of(m) is not None}


def resize_(module: nn.Module, shape: list[int]) -> None:
    """Give a layer new sizes in place, freshly initialized (a checkpoint then fills them)."""
    if isinstance(module, _ConvNd):
        module.in_channels, module.out_channels, module.groups = shape
        size = (module.out_channels, module.in_channels // module.groups, *module.kernel_size)
        if module.transposed:  # its weight is (in, out / groups, *kernel)
            size = (module.in_channels, module.out_channels // module.groups, *module.kernel_size)
        module.weight = nn.Parameter(torch.empty(size))
        if module.bias is not None:
            module.bias = nn.Parameter(torch.empty(module.out_channels))
    elif isinstance(module, nn.Linear):
        module.in_features, module.out_features = shape
        module.weight = nn.Parameter(torch.empty(module.out_features, module.in_features))
        if module.bias is not None:
            module.bias = nn.Parameter(torch.empty(module.out_features))
    elif isinstance(module, _NormBase):
        module.num_features = n = shape[0]
        if module.affine:
            module.weight, module.bias = nn.Parameter(torch.empty(n)), nn.Parameter(torch.empty(n))
        if module.track_running_stats:
            module.running_mean, module.running_var = torch.zeros(n), torch.ones(n)
    module.reset_parameters()


def resized_net(base_target: str, base_kwargs: dict, shapes: dict[str, list[int]], **dims):
    """The net `base_target(**base_kwargs, **dims)` with the layers in `shapes` resized.
    `dims`: the datamodule's (in_channels, num_classes, a table's statistics, ...), of which
    the base factory gets those it names, as the run's own net got them."""
    import hydra

    factory = hydra.utils.get_object(base_target)
    accepted = inspect.signature(factory).parameters
    net = factory(
        **base_kwargs, **{k: v for k, v in dims.items() if k in accepted and v is not None}
    )
    modules = dict(net.named_modules())
    for name, shape in shapes.items():
        resize_(modules[name], list(shape))
    return net


#: the run's builder hands this factory every dim (litlab.config.build: `_accepted`)
resized_net.passes_dims_on = True
