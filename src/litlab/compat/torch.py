"""torch internals litlab uses (checked against torch 2.14.1).

- `torch.distributed.init_process_group` is wrapped (in memory, once per process): the ranks'
  join gets a timeout of its own and a line while it waits (runs/ddp_join);
- `distributed_c10d._get_default_store`: the rendezvous store, whose timeout goes back to the
  collectives' once every rank has joined;
- `Tensor._version`: the counter of in-place changes, by which a cached result of an
  unchanged tensor is reused (domains/graph/nets' sparse dropout);
- `torch._check`: a condition torch.export may assume (tasks/graphs, ops/op);
- an op's `_opoverload`: the key of torch.onnx's custom translation table (ops/op);
- `nn.modules.conv._ConvNd` and `nn.modules.batchnorm._NormBase`: the bases of every
  convolution and batch or instance norm, whose channels compression resizes
  (compression/prune);
- a module's `_forward_hooks`, `_forward_pre_hooks`, `_backward_hooks`: emptied on a meta copy
  of a net whose activations are counted (litlab/data), so that the hooks of the original
  (the first-forward watch: runs/run_end) do not run for the copy.
"""

import functools

CHECKED_WITH = "2.14.1"


def _version() -> str:
    import torch

    return torch.__version__


def _fail(what: str):
    from litlab.compat import missing

    return missing("torch", CHECKED_WITH, _version(), what)


def assume(condition, message=None) -> None:
    """`torch._check`: tells torch.export (and the compiler) that `condition` holds; eagerly, a
    false one raises RuntimeError with `message()`."""
    import torch

    torch._check(condition, message)


def version_counter(tensor) -> int:
    """How often `tensor` was changed in place (equal: the same values as then)."""
    return tensor._version


def op_overload(op):
    """The OpOverload behind a `torch.ops` packet's default overload."""
    return op._opoverload


def resizable_bases() -> tuple[type, type]:
    """(every convolution's base class, transposed too; every batch and instance norm's)."""
    from torch.nn.modules.batchnorm import _NormBase
    from torch.nn.modules.conv import _ConvNd

    return _ConvNd, _NormBase


HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")


def drop_hooks(module) -> None:
    """Empty the forward and backward hooks of `module` and its children (a copy's: the
    original's hooks, copied with it, would run for it)."""
    for child in module.modules():
        for name in HOOK_DICTS:
            getattr(child, name).clear()


def wrap_init_process_group(wrapper) -> None:
    """Every later `torch.distributed.init_process_group(*a, **kw)` (Lightning's strategies
    look it up at call time) runs `wrapper(original, *a, **kw)`; idempotent."""
    import torch.distributed as dist

    original = getattr(dist.init_process_group, "litlab_original", dist.init_process_group)

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        return wrapper(original, *args, **kwargs)

    init_process_group.litlab_original = original
    dist.init_process_group = init_process_group


def set_group_timeout(timeout) -> None:
    """The default process group's and its store's timeout (`datetime.timedelta`)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    dist.set_timeout(timeout)
    distributed_c10d._get_default_store().set_timeout(timeout)


def check_torch() -> None:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    for name in ("set_timeout", "DistError", "DistStoreError", "DistNetworkError"):
        if not hasattr(dist, name):
            raise _fail(f"torch.distributed.{name}")
    if not callable(getattr(distributed_c10d, "_get_default_store", None)):
        raise _fail("torch.distributed.distributed_c10d._get_default_store")
    import torch

    if not callable(getattr(torch, "_check", None)):
        raise _fail("torch._check")
    if not isinstance(getattr(torch.zeros(1), "_version", None), int):
        raise _fail("Tensor._version")
    import inspect

    from torch._library.custom_ops import CustomOpDef  # what torch.library.custom_op returns

    if "self._opoverload" not in inspect.getsource(CustomOpDef):  # set when the op registers
        raise _fail("torch.library.CustomOpDef._opoverload")
    module = torch.nn.Linear(1, 1)
    if not all(isinstance(getattr(module, name, None), dict) for name in HOOK_DICTS):
        raise _fail("torch.nn.Module._forward_hooks / _forward_pre_hooks / _backward_hooks")
    try:
        resizable_bases()
    except ImportError as err:
        raise _fail("torch.nn.modules.conv._ConvNd / batchnorm._NormBase") from err
