"""A rank whose peer died: one line of its own, not a traceback per rank.

When a process of a multi-process job dies (a node lost, out of memory, `kill -9`), the others
fail at their next collective with gloo's or NCCL's low-level error. `peer_lost` turns that
error into `PeerLost`, which every rank prints (on another node it is the only line there)."""

import re

from litlab.errors import UserError, one_line
from litlab.utils.distributed import rank

# what gloo/NCCL/the rendezvous store say when a peer process or node is gone
PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Connection refused",
    "NCCL communicator was aborted",
)


class PeerLost(UserError):
    """Another rank of the job died or became unreachable: this rank stops with one line of its
    own (every rank says it: on another node it is the only line there), exit code 1."""

    exit_code = 1
    every_rank = True


def peer_lost(err: BaseException) -> PeerLost | None:
    """The one-line error for a collective that failed because a peer is gone, else None."""
    import torch.distributed as dist

    dist_error = getattr(dist, "DistError", ())
    if not (isinstance(err, dist_error) or any(s in str(err) for s in PEER_GONE)):
        return None
    reason = re.sub(r"^\[[^\]]*\]\s*", "", one_line(err, limit=400))[:160]  # no gloo file:line
    return PeerLost(
        f"DDP rank {rank()}: another process of this job stopped or cannot be reached "
        f"({reason}); this rank stops too; the failed process's own log (its node's console) "
        f"says why"
    )
