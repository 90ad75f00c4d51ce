"""The default student of `compress=distill`: chosen per domain from the teacher's own model
config, so that it has at most `max_params_ratio` (a quarter) of the teacher's parameters.

- nets with a width knob (small CNN, 3D U-Net, 3D ResNet, GNNs): the same net, narrower;
- nets without one (torchvision's ResNet-18): the small CNN of configs/model/cnn.yaml;
- a net class with its own `narrowed(net_config, scale)` (the table MLP): that.
The width is shrunk step by step and the student built and counted at each step: the first
that fits is taken, so the bound holds for any data (Cora's 1,433 input features dominate a
GCN's parameters; a digit's 64 pixels do not)."""

import copy
from collections.abc import Callable

from litlab.errors import UserError

# scale factors tried in order on a net's width, in steps of 0.05: the first student that fits
# is kept, so it lands just under the bound (1.0: a student given narrower on the command line
# is kept as given; a jump from 1.0 to 0.5 had cut such a student at 26% to 7% of its teacher)
SCALES = tuple(round(1.0 - 0.05 * i, 2) for i in range(20))


def _channels(net: dict, scale: float) -> dict:
    return {"channels": [max(2, round(c * scale)) for c in net["channels"]]}


def _widen(net: dict, scale: float) -> dict:
    return {"widen_factor": net.get("widen_factor", 1.0) * scale}


def _hidden(net: dict, scale: float) -> dict:
    """GNN widths stay multiples of the attention heads (GAT: heads x channels per head)."""
    heads = net.get("heads", 1) if net.get("conv") == "gat" else 1
    per_head = max(1, round(net.get("hidden_channels", 16) * scale / heads))
    # dropout 0.5 on a few hidden units drops most of them: at most 0.2 on a narrowed GNN
    return {"hidden_channels": per_head * heads, "dropout": min(net.get("dropout", 0.0), 0.2)}


# net factory -> how it narrows (keys of its `net` config, given a scale factor)
NARROW: dict[str, Callable[[dict, float], dict]] = {
    "litlab.domains.vision.nets.cnn.SmallCNN": _channels,
    "litlab.domains.medical3d.nets.unet3d.unet3d": _channels,
    "litlab.domains.medical3d.nets.resnet3d.resnet3d": _widen,
    "litlab.domains.graph.nets.gnn.GNN": _hidden,
}
# net factory -> a smaller net of another family, with the optimizer that trains it
REPLACE = {
    "litlab.domains.vision.nets.resnet.resnet18": {
        "net": {"_target_": "litlab.domains.vision.nets.cnn.SmallCNN", "channels": [32, 64, 128]},
        "optimizer": {
            "_target_": "torch.optim.AdamW",
            "_partial_": True,
            "lr": 0.005,
            "weight_decay": 0.0005,
        },
    },
}


def candidates(teacher_model: dict):
    """Student model configs, largest first."""
    model = copy.deepcopy(teacher_model)
    target = model["net"]["_target_"]
    if target in REPLACE:
        model |= copy.deepcopy(REPLACE[target])
        target = model["net"]["_target_"]
        yield copy.deepcopy(model)
    narrow = NARROW.get(target) or _own_narrowing(target)
    if narrow is None:
        known = ", ".join(sorted({*NARROW, *REPLACE}))
        raise UserError(
            f"compress=distill has no default student for {target} (it has for {known}); "
            f"name one: model@compress.distill.student=NAME or "
            f"+compress.distill.student.net.KEY=VALUE"
        )
    base = model["net"]
    for scale in SCALES:
        yield copy.deepcopy(model) | {"net": {**base, **narrow(base, scale)}}


def _own_narrowing(target: str):
    """A net (class or factory) that says how it narrows (`narrowed(net_config, scale) ->
    keys`), as a researcher's own net does; None for another or an unknown one."""
    try:
        import hydra

        return getattr(hydra.utils.get_object(target), "narrowed", None)
    except Exception:  # noqa: BLE001 (not a class: the one-line refusal above)
        return None


def fitting_student(
    teacher_model: dict, student: dict, count: Callable[[dict], int], ratio: float
) -> dict:
    """The largest narrowing of `student` (a model config) with at most `ratio` x the
    teacher's parameters, counted by `count(model_config)` (the net built for this data)."""
    limit = ratio * count(teacher_model)
    tried = None
    for candidate in candidates(student):
        tried = count(candidate)
        if tried <= limit:
            return candidate
    raise UserError(
        f"compress=distill: no default student has <= {ratio:g} of the teacher's parameters "
        f"(the smallest has {tried:,}); name one with model@compress.distill.student=NAME"
    )


def smaller_student(student: dict, teacher: dict, count) -> None:
    """A student is smaller than its teacher: one line naming both sizes when it is not."""
    mine, theirs = count(student), count(teacher)
    if mine > theirs:
        raise UserError(
            f"compress.distill.student has {mine:,} parameters, more than its teacher's "
            f"{theirs:,}: a student is smaller than its teacher; give it narrower layers (e.g. "
            f"+compress.distill.student.net.channels=...) or leave compress.distill.student "
            f"unset for the default one (at most max_params_ratio of the teacher)"
        )
