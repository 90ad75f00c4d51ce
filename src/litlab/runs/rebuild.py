"""Rebuild a trained run from its checkpoint alone: the stored config gives the exact data split
and net; the weights are loaded weights-only. eval, export, serve and compress start here."""

import os
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from litlab.errors import one_line


@dataclass
class LoadedRun:
    model: Any  # the LightningModule, holding the checkpoint's weights, in eval mode
    datamodule: Any  # built from the stored config (call setup() for the split you need)
    config: DictConfig  # the run's resolved config, as stored in the checkpoint
    checkpoint: dict  # the raw checkpoint dict (tensors on CPU)


def load_run(
    ckpt_path, data_overrides: dict | None = None, *, trust: bool = False, data_dir=None
) -> LoadedRun:
    """The model and datamodule of the run that wrote `ckpt_path`.

    `data_overrides` replaces data settings (e.g. a batch size or a data_dir on this machine).
    The stored config is data: plain values naming only the kinds of classes the recipes build
    (`litlab.checkpointing.trust`), checked with the overrides merged in and built exactly as
    checked, unless `trust=True`: a crafted file cannot run code. Its data folders move to
    `data_dir` (this machine's; default: LITLAB_DATA_DIR or <project>/data), so a file never
    chooses where litlab writes, unless the user chose them on the command line of the run,
    as its run dir records (`litlab.checkpointing.trust`). Its weights, stored config
    and provenance are validated first (`checkpointing.load`, `config.checkpoints.check_stored`,
    `checkpointing.weights`): one line, not a traceback or a NaN model."""
    from litlab.checkpointing import load as weights
    from litlab.checkpointing.load import load
    from litlab.checkpointing.run_config import CONFIG_KEY

    ckpt = load(ckpt_path)
    stored, source = ckpt[CONFIG_KEY], str(ckpt_path)
    run = rebuild(
        stored,
        source,
        data_overrides,
        trust=trust,
        data_dir=data_dir,
        written_by=(ckpt_path, stored.get("ckpt_path")),
    )
    state = weights.without_legacy(ckpt["state_dict"])
    weights.check_tensors_fit(state, run.model.state_dict(), source)  # before any tensor is copied
    run.model.load_state_dict(state)
    run.model.eval()
    return LoadedRun(run.model, run.datamodule, run.config, ckpt)


def rebuild(
    stored: dict,
    source: str,
    data_overrides: dict | None = None,
    *,
    trust: bool = False,
    data_dir=None,
    written_by=(),
) -> LoadedRun:
    """The model (its net freshly initialized) and datamodule a stored run config builds, as
    `load_run` builds a checkpoint's: checked unless `trust`, data folders this machine's.
    `source`: the file it came from, as messages name it (`trust.ExportedFile` for a model
    file); `written_by`: the checkpoints whose run dirs record the data folders the user
    chose. The returned run holds no checkpoint ({})."""
    from litlab.checkpointing import trust as trusted  # `trust` is the argument
    from litlab.config import build, data_paths
    from litlab.config.checkpoints import check_stored

    if data_overrides:  # this command's own values, resolved where they were composed
        data_overrides = data_paths.absolute_values(
            {
                k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                for k, v in data_overrides.items()
            }
        )  # relative files and folders: from this folder, also in a checkpoint made from it
    if data_dir is None:  # as configs/paths/default.yaml says: LITLAB_DATA_DIR or <project>/data
        from litlab.config.resolvers import PROJECT_ROOT

        data_dir = os.environ.get("LITLAB_DATA_DIR") or str(PROJECT_ROOT / "data")
    if not trust:
        # plain data first: its folders are then plain strings
        trusted.check_is_data(stored, source)
        overridden = tuple(data_overrides or ())
        # folders the user typed when training on this machine (its run dir's record) stay
        chosen = trusted.user_chosen(*written_by)
        stored = trusted.here(stored, data_dir, source, overridden, chosen)
    cfg = trusted.checked(stored, source, data_overrides, trust=trust)
    check_stored(_plain(cfg, source), source)  # as a command line's model and data are
    datamodule = build.datamodule(cfg)
    model = build.model(cfg, datamodule)
    model.eval()
    return LoadedRun(model, datamodule, cfg, {})


def _plain(cfg: DictConfig, source: str) -> dict:
    """The config to build, resolved (a trusted file may interpolate): one line if it cannot."""
    from litlab.checkpointing.trust import untrusted_refusal

    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as err:  # noqa: BLE001  (an interpolation a trusted file names)
        raise untrusted_refusal(source, f"does not resolve: {one_line(err)}") from None
