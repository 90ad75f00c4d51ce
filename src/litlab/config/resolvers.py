"""OmegaConf resolvers used by configs/. Registered on import; omegaconf only (cheap)."""

import os
import sys
from pathlib import Path

from omegaconf import OmegaConf

from litlab.checkpointing import resume  # noqa: F401  (registers hydra/resumable.yaml's resolvers)
from litlab.utils.code_state import CODE_ROOT, snapshot_origin

# where data and logs live (paths.root_dir): the project folder, also for a sweep's job that
# runs from a code snapshot (CODE_ROOT: the folder whose src/ and configs/ run)
PROJECT_ROOT = snapshot_origin() or CODE_ROOT
# the configs every entry point composes (`compose` in Python), of the code that runs
CONFIG_DIR = CODE_ROOT / "configs"


def wandb_offline() -> bool:
    """Offline unless the user has wandb credentials (env var, `wandb login` netrc entry)."""
    if os.environ.get("WANDB_MODE") in ("online", "offline"):
        return os.environ["WANDB_MODE"] == "offline"
    if os.environ.get("WANDB_API_KEY"):
        return False
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return not (netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"))


def certainly_no_gpu() -> bool:
    """True when no CUDA/ROCm device can be visible, found without importing torch (2-3 s)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return True
    devices = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")
    return sys.platform.startswith("linux") and not any(os.path.exists(d) for d in devices)


def ddp_devices(accelerator: str = "auto"):
    """trainer=ddp's process count: every GPU ("auto") when there are GPUs, else 2 CPU
    processes (Lightning's "auto" means 1 on the CPU)."""
    if accelerator in ("cpu",):
        return 2
    if accelerator in ("gpu", "cuda"):
        return "auto"
    if certainly_no_gpu():
        return 2
    import torch

    return "auto" if torch.cuda.is_available() else 2


def on_gpu(accelerator: str = "auto", gpu_value=None, cpu_value=None):
    """`gpu_value` when the accelerator is (or `auto` finds) a GPU, else `cpu_value`."""
    return gpu_value if ddp_devices(accelerator) == "auto" else cpu_value


def table_name(default: str, *, _root_) -> str:
    """`task_name` of a table run: the stem of `data.path` (`mydata/visits.csv` -> `visits`,
    as a plain folder name) when the run reads a file of the user's, else `default`: a run
    on your table is filed, tagged and headed by it, not by the recipe it took (`diabetes`).
    A sweep keeps `default`: each job resolves its own name, and jobs reading other tables
    (`data.path=a.csv,b.csv`) must stay in the sweep's one folder."""
    import re

    from hydra.core.hydra_config import HydraConfig

    mode = OmegaConf.select(_root_, "hydra.mode", default=None)
    if mode is None and HydraConfig.initialized():  # a task's config: Hydra's node removed
        mode = HydraConfig.get().mode
    try:
        path = OmegaConf.select(_root_, "data.path", default=None)
    except Exception:  # noqa: BLE001  (an interpolation that fails: validation names it)
        return default
    if str(mode).endswith("MULTIRUN") or not isinstance(path, str) or not path.strip():
        return default
    stem = re.sub(r"[^\w.-]+", "_", Path(path).stem).strip("._")[:64]
    return stem or default


def env_folder(name: str, default: str) -> str:
    """The folder the environment variable `name` names, or `default` where it is unset or
    empty (`LITLAB_LOG_DIR=` in a .env copied from .env.example: `oc.env` would give ''). A
    value with `${`, which OmegaConf would read as an interpolation, is refused by name (it
    failed as "GrammarParseError: no viable alternative at input ..." or a traceback)."""
    from litlab.errors import UserError

    value = os.environ.get(name) or default
    if value is not default and "${" in value:
        raise UserError(f"{name}={value!r}: a folder path without '${{'; set a plain path")
    return value


def register() -> None:
    OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT), replace=True)
    OmegaConf.register_new_resolver("env_folder", env_folder, replace=True)
    OmegaConf.register_new_resolver("wandb_offline", wandb_offline, replace=True)
    OmegaConf.register_new_resolver("ddp_devices", ddp_devices, replace=True)
    OmegaConf.register_new_resolver("on_gpu", on_gpu, replace=True)
    OmegaConf.register_new_resolver("table_name", table_name, replace=True)


register()
