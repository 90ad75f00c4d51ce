"""The Trainer's settings against this machine (accelerator, strategy, devices, precision):
refused in one line before any rank starts. `check_trainer_plain` needs no import (fast path);
`check_trainer` asks Lightning's registries and torch."""

import os

from litlab.config.signatures import closest as _closest
from litlab.errors import UserError

PRECISIONS_NOT_ON_CPU = ("16-mixed", "16", 16)


def _available(accelerator: str) -> int:
    import torch

    if accelerator in ("gpu", "cuda"):
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())
    return os.cpu_count() or 1


def check_trainer_plain(t: dict) -> None:
    """What needs no import: a GPU asked for where none can be (no device files), precision
    on a CPU."""
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
            f"trainer.precision=bf16-mixed or 32-true on CPU (16-mixed needs a GPU)"
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
                f"{', '.join(valid)}{_closest(accelerator, valid)}"
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
                f"{_closest(strategy, valid)}"
            )
    check_trainer_plain({**t, "accelerator": accelerator})
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
