"""OmegaConf resolvers used by configs/. Registered on import; omegaconf only (cheap)."""
import os
from pathlib import Path

from omegaconf import OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def wandb_offline() -> bool:
    """Offline unless the user has wandb credentials (env var, `wandb login` netrc entry)."""
    if os.environ.get("WANDB_MODE") in ("online", "offline"):
        return os.environ["WANDB_MODE"] == "offline"
    if os.environ.get("WANDB_API_KEY"):
        return False
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return not (netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"))


def register() -> None:
    OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT), replace=True)
    OmegaConf.register_new_resolver("wandb_offline", wandb_offline, replace=True)


register()
