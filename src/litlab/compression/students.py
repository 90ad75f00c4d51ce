"""The default student of `compress=distill`: from the teacher's own model config, so that it
has at most `max_params_ratio` (a quarter) of the teacher's parameters. Each net says how:

- a net with a width knob (small CNN, U-Nets, 3D ResNet, GNNs, the table MLP) has
  `narrowed(net_config, scale) -> keys`: the same net, narrower;
- a net without one (torchvision's ResNet-18) names a smaller net of another family as its
  `student` (a model config: the small CNN of configs/model/cnn.yaml).
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


def candidates(teacher_model: dict):
    """Student model configs, largest first: the teacher's net narrowed (its `narrowed`), or
    first replaced by the smaller net of another family it names (its `student`)."""
    model = copy.deepcopy(teacher_model)
    replacement = getattr(_net(model["net"]["_target_"]), "student", None)
    if replacement is not None:
        model |= copy.deepcopy(replacement)
        yield copy.deepcopy(model)
    target = model["net"]["_target_"]
    narrow = getattr(_net(target), "narrowed", None)
    if narrow is None:
        raise UserError(
            f"compress=distill has no default student for {target} (a net gives one by "
            "narrowed(net_config, scale), see docs/compress.md); name one: "
            "model@compress.distill.student=NAME or +compress.distill.student.net.KEY=VALUE"
        )
    base = model["net"]
    for scale in SCALES:
        yield copy.deepcopy(model) | {"net": {**base, **narrow(base, scale)}}


def _net(target: str):
    """The net class or factory a config names (None for one that cannot be read: refused in
    one line by `candidates`)."""
    try:
        import hydra

        return hydra.utils.get_object(target)
    except Exception:  # noqa: BLE001
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
