"""Torch-Pruning internals litlab uses (checked against torch-pruning 1.6.1, which calls itself 1.6.0).

- `dependency.shape_infer.infer_out_channels_recursively`: how the dependency graph finds the
  channel count of each input of a `torch.cat`, to map a pruned channel of the concatenation to
  the branch it came from (a U-Net's skip connections). Through a node of several inputs it
  keeps the *last* input's answer; a PReLU's inputs are its feature map and its reshaped weight
  (no channels), so the branch of a 3D U-Net's up path (PReLU + PReLU) counted as unknown and
  building the graph failed (`int + NoneType`). `first_known_channels` keeps the first input
  that has a count, for as long as the graph is built and pruned.
- `Group[0].dep.target.module`: the layer a pruning group of `DependencyGraph.get_all_groups`
  is rooted at (its first dependency's target), as Torch-Pruning's own pruners read it.
"""

import contextlib

CHECKED_WITH = "1.6.1"


def _version() -> str:
    from importlib.metadata import version

    return version("torch-pruning")


def _fail(what: str):
    from litlab.compat import missing

    return missing("torch-pruning", CHECKED_WITH, _version(), what)


def _module():
    from torch_pruning.dependency import shape_infer

    if not callable(getattr(shape_infer, "infer_out_channels_recursively", None)):
        raise _fail("dependency.shape_infer.infer_out_channels_recursively")
    return shape_infer


@contextlib.contextmanager
def first_known_channels():
    """Inside: a node's output channels are its own, else those of its first input that has
    a count (the sum of them through a concatenation, as Torch-Pruning does)."""
    from torch_pruning import ops

    shape_infer = _module()
    original = shape_infer.infer_out_channels_recursively

    def infer(graph, node, depth):
        if node.type == ops.OPTYPE.CONCAT or graph.get_out_channels(node) is not None:
            return original(graph, node, depth)
        for parent in node.inputs:
            if parent.type == ops.OPTYPE.SPLIT and parent.module.split_sizes is not None:
                return parent.module.split_sizes[parent.outputs.index(node)]
            depth[0] += 1
            if depth[0] > 500:  # Torch-Pruning's own MAX_RECURSION_DEPTH
                return None
            if (channels := infer(graph, parent, depth)) is not None:
                return channels
        return None

    shape_infer.infer_out_channels_recursively = infer  # its own recursion looks it up here
    try:
        yield
    finally:
        shape_infer.infer_out_channels_recursively = original


def group_root(group):
    """The layer whose output channels a pruning group removes."""
    try:
        return group[0].dep.target.module
    except (AttributeError, IndexError, TypeError):
        raise _fail("dependency.Group[0].dep.target.module") from None


def check_torch_pruning() -> None:
    _module()
