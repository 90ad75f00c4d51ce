"""Config options found without importing torch: a data config's target and task, the data
configs that fit a model, and the one line of a model/data mismatch. Used by validation (before
torch) and by building (after)."""

from omegaconf import OmegaConf

from litlab.config.compose import CONFIG_DIR
from litlab.tasks import kind_name_of_data


def choice(group: str) -> str:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return str(HydraConfig.get().runtime.choices.get(group))
    return "?"


def target_of(path) -> str | None:
    """A config file's `_target_`, following its defaults list (e.g. citeseer extends cora)."""
    node = OmegaConf.load(path)
    if "_target_" in node:
        return node._target_
    parents = [d for d in node.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    return target_of(path.parent / f"{parents[0]}.yaml") if parents else None


def data_options(kinds) -> list[str]:
    """Names of the data configs whose datamodule declares a kind in `kinds`."""
    fits = []
    for path in sorted((CONFIG_DIR / "data").glob("*.yaml")):
        try:
            target = target_of(path)
            if target and kind_name_of_data(target) in kinds:
                fits.append(path.stem)
        except Exception:  # a broken data config must not hide the real error
            continue
    return fits


def incompatible(kinds, kind: str) -> str:
    return (
        f"model={choice('model')} ({', '.join(kinds)}) cannot train on "
        f"data={choice('data')} ({kind}); data that fit this model: "
        f"{', '.join(data_options(kinds))}"
    )
