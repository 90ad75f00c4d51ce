"""Strategies whose class depends on the machine, built by `trainer.strategy._target_`.

`fsdp`: trainer=fsdp. On GPUs, Lightning's FSDPStrategy (torch's FullyShardedDataParallel,
"FSDP1"). On CPUs torch 2.14's FSDP1 refuses to run ("FSDP needs a non-CPU accelerator device,
but no accelerator device is detected", and Lightning's FSDPStrategy refuses a CPU before
that), but torch's FSDP2 (`fully_shard`) shards over gloo: there it is Lightning's
ModelParallelStrategy with every process a data-parallel shard (no tensor parallelism), the
net sharded layer by layer in `LitModule.configure_model`, and checkpoints written whole
(one .ckpt file that eval.py, load_run and resume read as any other)."""

from typing import Literal


def _on_gpu(accelerator: str) -> bool:
    if accelerator in ("gpu", "cuda"):
        return True
    if accelerator != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def fsdp(
    accelerator: str = "auto",
    devices: int | str = "auto",
    num_nodes: int = 1,
    sharding_strategy: Literal[
        "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"
    ] = "FULL_SHARD",
    state_dict_type: Literal["full", "sharded"] = "full",
    cpu_offload: bool = False,
):
    """FSDPStrategy on GPUs, ModelParallelStrategy (FSDP2 over gloo) on CPUs (see above)."""
    if _on_gpu(str(accelerator)):
        from lightning.pytorch.strategies import FSDPStrategy

        return FSDPStrategy(
            sharding_strategy=sharding_strategy,
            state_dict_type=state_dict_type,
            cpu_offload=cpu_offload,
        )
    from lightning.pytorch.strategies import ModelParallelStrategy

    processes = int(devices) * int(num_nodes)
    return ModelParallelStrategy(
        data_parallel_size=processes,
        tensor_parallel_size=1,
        save_distributed_checkpoint=state_dict_type == "sharded",
        process_group_backend="gloo",
    )
