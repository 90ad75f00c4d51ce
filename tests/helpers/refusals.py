"""Bad commands of an entry point, checked in-process the way its command runs them
(`litlab.api.run`: the composed config, a run dir made as Hydra makes it, the recipe): each
must raise one `UserError` line, leave no run dir behind, and (pure config errors) take under
3 seconds of CPU (not wall time, which a loaded machine stretches: a check of what the refusal
does, not of what else runs). `fake_checkpoint` writes a litlab checkpoint whose stored config is a real composed
one, without training: validation reads only the config."""

import time
from pathlib import Path

from litlab.errors import UserError

#: pure config errors are refused within this many CPU seconds (checkpoint reads excluded)
FAST_S = 3.0


def refused(config: str, overrides: list[str], recipe, log_dir: Path) -> tuple[str, float]:
    """(the one line, CPU seconds taken) of a command that must be refused."""
    from litlab import api

    start = time.process_time()
    try:
        api.run(config, [*overrides, f"paths.log_dir={log_dir}"], recipe)
    except UserError as err:
        seconds = time.process_time() - start
        message = str(err)
    else:
        raise AssertionError(f"{config} {' '.join(overrides)} was not refused")
    assert "\n" not in message and message, repr(message)
    runs = log_dir / config / "runs"
    left = sorted(runs.glob("*")) if runs.exists() else []
    assert not left, f"run dirs left behind: {left}"
    return message, seconds


def fake_checkpoint(path: Path, overrides: list[str] = ()) -> Path:
    """A checkpoint of train.py's composed config (`overrides` pick model and data), with no
    weights: enough for everything that is checked before a run starts."""
    import torch
    from omegaconf import OmegaConf

    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.config.compose import compose

    cfg = compose("train", [*overrides, f"paths.log_dir={path.parent}"], output_dir=path.parent)
    stored = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "data")}
    stored |= {"task_name": "train", "seed": 42}
    if stored["data"].get("split_file"):  # the run that would have written it never ran
        stored["data"]["split_file"] = None
    torch.save({"state_dict": {}, CONFIG_KEY: stored}, path)
    return path


def raises_one_line(call, *words) -> str:
    """The `UserError` line `call()` raises: one line holding every one of `words`."""
    import pytest

    with pytest.raises(UserError) as err:
        call()
    line = str(err.value)
    assert "\n" not in line and all(w in line for w in words), line
    return line
