"""The Trainer's settings against this machine (accelerator, strategy, devices, precision)
and what an export needs of it: refused in one line before any rank starts, the last check
of a config's groups (Lightning's registries and torch are asked)."""

import os

from litlab.errors import UserError, closest

#: precisions Lightning accepts that a CPU run cannot use: no fp16 kernels for most CPU ops,
#: bf16-true casts the weights but not the batches (the first forward fails), and Transformer
#: Engine is CUDA only. 32-true, 64-true and bf16-mixed run on a CPU.
PRECISIONS_NOT_ON_CPU = (
    "16-mixed", "16", 16, "16-true", "bf16-true", "transformer-engine",
    "transformer-engine-float16",
)  # fmt: skip


def _available(accelerator: str) -> int:
    import torch

    if accelerator in ("gpu", "cuda"):
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())
    return os.cpu_count() or 1


def check_impossible_here(t: dict) -> None:
    """What needs no import: a GPU asked for where none can be (no device files), precision
    on a CPU. Asked before any target is imported (a refusal in about a second), and again by
    `check_trainer` once torch has said which accelerator `auto` is."""
    from litlab.config.resolvers import certainly_no_gpu

    accelerator = t.get("accelerator")
    if accelerator in ("gpu", "cuda") and certainly_no_gpu():
        raise UserError(
            f"trainer.accelerator={accelerator} but no GPU device is visible; use "
            f"trainer.accelerator=cpu (or trainer=cpu)"
        )
    if accelerator in ("auto", None) and certainly_no_gpu():
        accelerator = "cpu"
    if accelerator == "cpu" and t.get("precision") in PRECISIONS_NOT_ON_CPU:
        raise UserError(
            f"trainer.precision={t['precision']} is not supported on CPU; use "
            f"trainer.precision=bf16-mixed or 32-true on CPU (16-mixed, 16-true, bf16-true "
            f"and transformer-engine need a GPU)"
        )


def check_trainer(t: dict) -> None:
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    accelerator = t.get("accelerator") or "auto"
    if isinstance(accelerator, str):
        valid = sorted(AcceleratorRegistry.available_accelerators()) + ["auto", "gpu"]
        if accelerator not in valid:
            raise UserError(
                f"trainer.accelerator={accelerator} is not valid; valid: "
                f"{', '.join(valid)}{closest(accelerator, valid)}"
            )
        if accelerator in ("gpu", "cuda", "mps") and not _available(accelerator):
            raise UserError(
                f"trainer.accelerator={accelerator} but no {accelerator.upper()} "
                f"device is visible; use trainer.accelerator=cpu (or trainer=cpu)"
            )
        if accelerator == "auto":
            accelerator = "cuda" if _available("cuda") else ("mps" if _available("mps") else "cpu")
    strategy = t.get("strategy")
    if isinstance(strategy, str):
        valid = StrategyRegistry.available_strategies() + ["auto"]
        if strategy not in valid:
            raise UserError(
                f"trainer.strategy={strategy} is not valid; valid: auto, ddp, "
                f"ddp_spawn, fsdp, deepspeed, ... (lightning's StrategyRegistry)"
                f"{closest(strategy, valid)}"
            )
    check_impossible_here({**t, "accelerator": accelerator})
    _check_precision_on_gpu(t.get("precision"), accelerator)
    devices = t.get("devices")
    if isinstance(devices, str) and devices.lstrip("-").isdigit():
        devices = int(devices)
    have = _available(accelerator) if isinstance(accelerator, str) else None
    if have and isinstance(devices, int) and devices != -1 and not 1 <= devices <= have:
        raise UserError(
            f"trainer.devices={devices} is not valid on {accelerator}: this "
            f"machine has {have}; use 1..{have}, -1 or auto"
        )
    if have and isinstance(devices, list) and any(int(d) >= have for d in devices):
        raise UserError(
            f"trainer.devices={devices} names a device this machine lacks "
            f"({have} {accelerator} device(s): indices 0..{have - 1})"
        )


def _check_precision_on_gpu(precision, accelerator) -> None:
    """What the GPU present cannot run: bf16 on a GPU without bf16 (before Ampere), Transformer
    Engine without its package."""
    import importlib.util

    import torch

    text = str(precision)
    bf16_on_gpu = accelerator in ("gpu", "cuda") and text.startswith("bf16")
    if bf16_on_gpu and torch.cuda.device_count() and not torch.cuda.is_bf16_supported():
        raise UserError(
            f"trainer.precision={text}: this GPU ({torch.cuda.get_device_name(0)}) has no "
            "bfloat16; use trainer.precision=16-mixed or 32-true"
        )
    if text.startswith("transformer-engine") and not importlib.util.find_spec("transformer_engine"):
        raise UserError(
            f"trainer.precision={text} needs NVIDIA's transformer_engine package, which is "
            "not installed; use trainer.precision=bf16-mixed, 16-mixed or 32-true"
        )


def tensorrt_missing() -> str | None:
    """None when TensorRT can run here, else one sentence saying what is missing."""
    import importlib.util

    import torch

    lacks = []
    if not torch.cuda.is_available():
        lacks.append("a CUDA GPU (torch.cuda.is_available() is False)")
    if importlib.util.find_spec("torch_tensorrt") is None:
        lacks.append("the torch_tensorrt package (pip install -r requirements-gpu.txt)")
    if not lacks:
        return None
    return (
        "tensorrt cannot run here: this machine lacks "
        + " and ".join(lacks)
        + "; formats onnx, pt2 and onnx_int8 work here"
    )
