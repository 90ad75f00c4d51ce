"""DDP plumbing that Lightning + Hydra do not get right on their own.

Lightning's `ddp` strategy re-executes the entry script once per extra local rank, with the
parent's `sys.argv` plus `hydra.run.dir=<hydra.run.dir>`. Under a multirun that re-runs the
whole sweep in every child (a sampling sweeper even draws other hyperparameters), writes into
the wrong folder, and under submitit re-executes submitit's own module. `install` replaces
that command: a child runs exactly its parent job's overrides, in the parent job's output dir.

It also makes evaluation exact: val/test shards are unpadded (Lightning's DistributedSampler
pads with duplicates that torchmetrics would count), as Lightning already does for predict.

`finish` ends a run cleanly: it destroys the process group while all ranks are alive, waits for
the child ranks and fails when one failed. Plain Lightning does neither: rank 0, which hosts the
rendezvous store, can exit while the other ranks' gloo threads still tear down against it (the
likely cause of `terminate called without an active exception`; bench/ddp.py --stress).
"""
import logging
import os
import sys
import warnings

log = logging.getLogger(__name__)
# environment a launch sets in the parent; restored after each job (multiruns start many)
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
# the job's hydra overrides that a child must not repeat (it is a single run, not a sweep)
SWEEP_KEYS = ("hydra/launcher", "hydra/sweeper", "hydra.launcher", "hydra.sweeper",
              "hydra.sweep", "hydra.run", "hydra.mode", "hydra.output_subdir")

_state: dict = {}


def rank() -> int:
    """Global rank from the launcher's environment (0 outside distributed runs)."""
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


def child_command(local_rank: int) -> tuple[list[str], str]:
    """The command of a child rank: the parent job's script and overrides, its output dir."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    hydra_overrides = [o for o in hc.overrides.hydra if not o.lstrip("~+").startswith(SWEEP_KEYS)]
    out = hc.runtime.output_dir.replace("\\", "\\\\").replace('"', '\\"')
    cmd = [sys.executable, _state["script"], *hc.overrides.task, *hydra_overrides,
           f'hydra.run.dir="{out}"', "hydra.output_subdir=null"]
    return cmd, hc.runtime.cwd


def _unpadded_eval_sampler(original):
    def sampler(dataloader, shuffle, overfit_batches, mode=None, **kwargs):
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSamplerWrapper
        from lightning.pytorch.trainer.states import RunningStage

        evaluating = mode in (RunningStage.VALIDATING, RunningStage.TESTING,
                              RunningStage.SANITY_CHECKING)
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
    """Give val/test shards without padding (idempotent). Also called from LitModule.setup,
    which runs inside ddp_spawn's worker processes, where `install`'s patches do not exist."""
    from lightning.pytorch.trainer.connectors import data_connector

    if not getattr(data_connector._get_distributed_sampler, "litlab", False):
        data_connector._get_distributed_sampler = _unpadded_eval_sampler(
            data_connector._get_distributed_sampler)
    # Lightning warns that eval shards are padded; with the sampler above they are not
    warnings.filterwarnings("ignore", message="Using `DistributedSampler` with the dataloaders")


def install(script: str) -> None:
    """Patch Lightning (in memory) so that DDP children and eval shards behave as above.

    `script` is the entry point's path (a child re-executes it)."""
    from lightning.fabric.strategies.launchers import subprocess_script as fabric_launcher
    from lightning.pytorch.strategies.launchers import subprocess_script as launcher

    _state["script"] = os.path.abspath(script)
    _state.setdefault("env", {k: os.environ.get(k) for k in LAUNCH_ENV})
    launcher._hydra_subprocess_cmd = fabric_launcher._hydra_subprocess_cmd = child_command
    unpad_eval_shards()
    if rank() > 0:
        quiet_rank_console(rank())


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


def describe(trainer, batch_size: int | None) -> None:
    """Tag rank 0's lines and say how many samples one optimizer step sees."""
    if trainer.world_size <= 1:
        return
    tag_log_lines(trainer.global_rank)
    if batch_size and trainer.global_rank == 0:
        accumulate = trainer.accumulate_grad_batches
        log.info("DDP: %d processes x batch_size %d x accumulate_grad_batches %d = %d samples "
                 "per optimizer step", trainer.world_size, batch_size, accumulate,
                 trainer.world_size * batch_size * accumulate)


def finish(trainer) -> None:
    """End a distributed run on every rank; rank 0 waits for its children and checks them."""
    import subprocess

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank tears down while another still talks to it
        dist.destroy_process_group()
    procs = getattr(getattr(trainer.strategy, "launcher", None), "procs", None) or []
    procs = [p for p in procs if isinstance(p, subprocess.Popen)]  # ddp_spawn joined its own
    failed = [(i + 1, p.wait()) for i, p in enumerate(procs)]
    failed = [(r, code) for r, code in failed if code != 0]
    for key, value in _state.get("env", {}).items():  # a multirun's next job starts afresh
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    if failed:
        raise RuntimeError(f"DDP child rank(s) failed: {failed} (local rank, exit code)")
