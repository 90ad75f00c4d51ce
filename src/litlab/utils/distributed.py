"""What every layer asks about distributed runs: which rank am I (cheap, no torch), and exact
val/test metrics under DDP. Starting and ending the ranks is `litlab.runs.ddp`;
ranks > 0 log warnings only, every line tagged with its rank.

Evaluation is exact: val/test shards are unpadded (Lightning's DistributedSampler pads with
duplicates that torchmetrics would count), as Lightning already does for predict.
"""

import logging
import os
import re
import warnings

# Lightning's PossibleUserWarning for a tensor logged per epoch without sync_dist under DDP
_NOT_SYNCED = r"It is recommended to use `self\.log\('(?:{})', \.\.\., sync_dist=True\)`"


def rank() -> int:
    """Global rank from the launcher's environment, in Lightning's order (0 outside DDP): a
    child rank Lightning (or litlab) starts has LOCAL_RANK only, and SLURM_PROCID can be set
    in an salloc shell that SLURM does not manage."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


def is_rank_zero() -> bool:
    """False in DDP ranks > 0 (they share rank 0's run dir: they never write or remove it)."""
    return rank() == 0 and os.environ.get("NODE_RANK", "0") == "0"


def _unpadded_eval_sampler(original):
    def sampler(dataloader, shuffle, overfit_batches, mode=None, **kwargs):
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSamplerWrapper
        from lightning.pytorch.trainer.states import RunningStage

        evaluating = mode is not None and RunningStage(mode).evaluating  # not predicting
        # every rank needs >= 1 sample, or the epoch-end metric sync would wait forever; a
        # smaller set is repeated whole, which leaves ratio metrics (acc, dice) unchanged
        if evaluating and len(dataloader.dataset) >= kwargs.get("num_replicas", 1):
            kwargs["shuffle"] = False
            kwargs.setdefault("seed", 0)
            return UnrepeatedDistributedSamplerWrapper(dataloader.sampler, **kwargs)
        return original(dataloader, shuffle, overfit_batches, mode=mode, **kwargs)

    sampler.litlab = True
    return sampler


def unpad_eval_shards() -> None:
    """Give val/test shards without padding (idempotent). Called from LitModule.setup: every
    process that evaluates runs it, ddp_spawn's workers included."""
    from litlab.compat.lightning import wrap_distributed_sampler

    wrap_distributed_sampler(_unpadded_eval_sampler)
    # Lightning warns that eval shards are padded; with the sampler above they are not
    warnings.filterwarnings("ignore", message="Using `DistributedSampler` with the dataloaders")


def synced_by_torchmetrics(names) -> None:
    """Silence Lightning's advice to log `names` with `sync_dist=True` (idempotent).

    Lightning cannot tell that a tensor came from a torchmetrics `compute()`, which has
    already gathered every rank's state: under DDP it printed the advice once per metric
    and split (nine lines for the default run). `sync_dist=True` would instead all-reduce
    the equal values again, a collective per metric per epoch that can also change their
    last bit with 3 ranks or more. The filter names exactly these metrics: a value a user
    logs unsynced in their own module is still pointed out."""
    alternatives = "|".join(re.escape(name) for name in sorted(names))
    warnings.filterwarnings("ignore", message=_NOT_SYNCED.format(alternatives))


class _RankFormatter(logging.Formatter):
    def __init__(self, inner: logging.Formatter | None, prefix: str):
        super().__init__()
        self.inner, self.prefix = inner or logging.Formatter(), prefix

    def format(self, record):
        return self.prefix + self.inner.format(record)


def tag_log_lines(rank_: int) -> None:
    """Prefix every log line with the rank (idempotent)."""
    for handler in logging.getLogger().handlers:
        if not isinstance(handler.formatter, _RankFormatter):
            handler.setFormatter(_RankFormatter(handler.formatter, f"[rank{rank_}] "))


def quiet_rank_console(rank_: int) -> None:
    """Ranks > 0 log warnings and errors only (rank 0 already says the rest once)."""
    tag_log_lines(rank_)
    for handler in logging.getLogger().handlers:
        handler.setLevel(max(handler.level, logging.WARNING))
    warnings.filterwarnings("ignore")  # the same Python warnings as rank 0's
