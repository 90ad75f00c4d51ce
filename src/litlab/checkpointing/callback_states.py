"""What a resume takes from a checkpoint besides weights: callback states. Lightning restores
`ModelCheckpoint`'s state on `fit(ckpt_path=...)` and later deletes the previous best and last
files that state names, so a crafted state is a way to delete files: refused here, before
train.py or compress.py resumes from the file (`config.checkpoints.check_checkpoint`)."""

from litlab.checkpointing.trust import shown
from litlab.errors import UserError

# the file paths of ModelCheckpoint's state (and the keys of its `best_k_models`)
STATE_PATHS = ("best_model_path", "kth_best_model_path", "last_model_path")


def check_callback_states(ckpt: dict, source: str) -> None:
    """Refuse callback states naming files outside their own checkpoint folder: a resumed
    ModelCheckpoint removes its previous best and last files, so a crafted `best_k_models`
    entry (`<dirpath>/../../victim`, an s3:// URL) would delete that file."""
    states = ckpt.get("callbacks") if isinstance(ckpt, dict) else None
    for name, state in (states or {}).items() if isinstance(states, dict) else ():
        if not isinstance(state, dict) or not isinstance(state.get("dirpath"), str | None):
            continue
        folder = str(state.get("dirpath") or "").rstrip("/")
        best = state.get("best_k_models")
        paths = [state.get(k) for k in STATE_PATHS] + list(best if isinstance(best, dict) else ())
        for path in paths:
            if path in (None, ""):
                continue
            text = str(path)
            if not isinstance(path, str) or ".." in text.replace("\\", "/").split("/"):
                ok = False
            else:
                ok = bool(folder) and text.startswith(folder + "/")
            if not ok:
                raise UserError(
                    f"ckpt_path={shown(source, 200)}: its callback state "
                    f"{shown(name.split('{')[0])} names the file {shown(text, 300)} outside "
                    f"its checkpoint folder {shown(folder, 200)}; a resume would delete it: "
                    f"refused (use a checkpoint litlab wrote)"
                )
