"""torch internals litlab uses (checked against torch 2.14.1).

- `torch.distributed.init_process_group` is wrapped (in memory, once per process): the ranks'
  join gets a timeout of its own and a line while it waits (recipes/ddp_join);
- `distributed_c10d._get_default_store`: the rendezvous store, whose timeout goes back to the
  collectives' once every rank has joined.
"""

import functools

CHECKED_WITH = "2.14.1"


def _version() -> str:
    import torch

    return torch.__version__


def _fail(what: str):
    from litlab.compat import missing

    return missing("torch", CHECKED_WITH, _version(), what)


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


def check() -> None:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    for name in ("set_timeout", "DistError", "DistStoreError", "DistNetworkError"):
        if not hasattr(dist, name):
            raise _fail(f"torch.distributed.{name}")
    if not callable(getattr(distributed_c10d, "_get_default_store", None)):
        raise _fail("torch.distributed.distributed_c10d._get_default_store")
