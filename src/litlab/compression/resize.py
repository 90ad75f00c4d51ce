"""Rebuild a structurally pruned net from config, so eval.py, export and resume need nothing
but the checkpoint: the pruned run config names the original net factory and the new shapes
of the layers pruning changed, and `resized_net` builds the original, then resizes them.

    net: {_target_: litlab.compression.resize.resized_net, base_target: <original factory>,
          base_kwargs: {...}, shapes: {"layer1.0.conv1": [in, out, groups], "bn1": [n], ...}}
"""

import inspect

import torch
from torch import nn

from litlab.compat.torch import resizable_bases

_ConvNd, _NormBase = resizable_bases()  # batch and instance norms

RESIZABLE = (_ConvNd, nn.Linear, _NormBase)


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
    return {
        name: shape_of(m)
        for name, m in net.named_modules()
        if shape_of(m) is not None and shape_of(m) != before.get(name)
    }


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
