"""The checkpoints a command names: the file exists, is a complete litlab checkpoint (read
weights_only, its tensors not read), of this model, names only targets litlab's configs can
name unless trusted, and its stored model and data pass the checks a command line's do.
One line (`UserError`) each; `config.validate` and the entry settings call them."""

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.config.messages import node_errors, refusal, refuse
from litlab.config.models import import_target, signature
from litlab.config.rules import stages
from litlab.errors import UserError, closest


def check_checkpoint(
    path, cfg_model: dict | None, trust: bool = True, data_overrides: dict | None = None
) -> None:
    """The file exists, is a complete litlab checkpoint (weights_only), and holds this model
    (`cfg_model`: a run resumes from it) or a run this command can rebuild (`check_rebuilt`)."""
    from litlab.checkpointing import load as checkpoint
    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.checkpointing.trust import check_callback_states

    p = Path(str(path))
    if p.is_dir():
        files = sorted((p / "checkpoints").glob("*.ckpt")) or sorted(p.glob("*.ckpt"))
        raise UserError(
            f"ckpt_path={path} is a folder; pass a .ckpt file"
            + (f" such as {files[0]}" if files else "")
        )
    ckpt = checkpoint.load(p, mmap=True)  # the tensors are not read
    check_callback_states(ckpt, str(path))  # a resume restores them: always
    if cfg_model is None:  # eval, export, compress, serve: the run is rebuilt from it
        return check_rebuilt(ckpt[CONFIG_KEY], str(path), trust, data_overrides)
    theirs = (ckpt[CONFIG_KEY].get("model") or {}).get("_target_")
    if theirs != cfg_model.get("_target_"):
        raise UserError(
            f"ckpt_path={path} holds a {theirs} model; this run builds "
            f"{cfg_model.get('_target_')}: pick the matching model=... or checkpoint"
        )


def check_stored(stored: dict, source: str, overridable: bool = False) -> None:
    """The model and data a checkpoint's stored config builds pass the checks a command line's
    do (stages 2 to 4 of `config.validate`), so a file from elsewhere fails in one line naming
    the key, not deep inside a build, a loss or an export. `stored`: plain data (`trust.check_is_data`
    passed); `overridable`: the command takes `data_overrides`, and a bad data key says how."""
    from litlab.checkpointing.trust import named

    where = f"{named(source)}: its stored config"
    for key in ("model", "data"):
        node = stored.get(key)
        if not isinstance(node, dict) or not isinstance(node.get("_target_"), str):
            what = "has no" if node is None else f"has a {type(node).__name__} as its"
            raise UserError(
                f"{where} {what} {key} node (a mapping with a _target_, as train.py stores "
                "it): not a checkpoint litlab can rebuild"
            )
    model, data = stored["model"], stored["data"]
    if not isinstance(model.get("net"), dict) or "_target_" not in model["net"]:
        raise UserError(f"{where} has no model.net node with a _target_ (the net it holds)")
    kinds = {"model": {"_target_": model["_target_"]}, "data": {"_target_": data["_target_"]}}
    for errors in stages(OmegaConf.create(kinds), {"model": model, "data": data}, {}):
        if errors:
            hint = _override_hint(errors[0], overridable)
            raise UserError(f"{where} is not valid: {refusal(errors)}{hint}")


def _override_hint(message: str, overridable: bool) -> str:
    """`; change it with +data_overrides.path=VALUE` for a refusal that names a data key."""
    key = re.match(r"^(?:unknown key )?data\.(\w+)", message)
    if not overridable or key is None:
        return ""
    return f"; change it for this command with +data_overrides.{key.group(1)}=VALUE"


#: the groups a command that takes `data_overrides` rebuilds from the checkpoint, never from
#: its own command line
REBUILT = ("data", "model")


def rebuilt_group_refusal(override: str, entry: str = "") -> str | None:
    """The line for `data.path=X` (or `+data.path=X`, `data=table`, `model.x=1`) given to a
    command that rebuilds the run from a checkpoint (eval, export, compress): Hydra would
    refuse the key, or add it and leave it unused. None for any other override."""
    key, sep, value = override.partition("=")
    group, _, name = key.lstrip("+~").partition(".")
    if group not in REBUILT:
        return None
    command = f"src/{entry}.py" if entry else "this command"
    if group == "model":
        return (
            f"{override}: {command} rebuilds the model from the checkpoint as it was trained "
            "and takes no model.* keys"
        )
    how = f"+data_overrides.{name}={value}" if name and sep else "+data_overrides.KEY=VALUE"
    return (
        f"{override}: {command} builds the data from the checkpoint's stored config (the "
        f"split it was trained on) and takes no data.* keys; change one with {how}"
    )


def refuse_rebuilt_groups(cfg: DictConfig) -> None:
    """A command that rebuilds its run from a checkpoint refuses `+data.*`/`+model.*` on its
    command line (Hydra adds them; nothing would read them) in one line saying how to change
    the data (`data_overrides`). A `data` node from a config file (configs/local) is left."""
    from hydra.core.hydra_config import HydraConfig

    if not any(group in cfg for group in REBUILT):
        return
    if not HydraConfig.initialized():  # a composed config handed to a recipe: no command line
        group = next(g for g in REBUILT if g in cfg)
        raise UserError(rebuilt_group_refusal(f"{group}=...") or group)
    hydra = HydraConfig.get()
    for override in hydra.overrides.task:
        if line := rebuilt_group_refusal(str(override), hydra.job.config_name or ""):
            raise UserError(line)


def stored_config(path) -> dict:
    """The run config inside a checkpoint (its tensors are not read)."""
    from litlab.checkpointing import load as checkpoint
    from litlab.checkpointing.run_config import CONFIG_KEY

    return checkpoint.load(path, mmap=True)[CONFIG_KEY]


def check_student(student: dict, stored: dict, key: str) -> None:
    """A distillation student (a model config, or keys merged onto the teacher's) can be built
    and learns the checkpoint's task kind: told before the original model is tested."""
    from litlab import tasks

    if "_target_" not in student:
        student = OmegaConf.to_container(OmegaConf.merge(stored["model"], student), resolve=True)
        refuse(node_errors(key, student, {}))
    kind = tasks.kind_of_data(stored["data"]["_target_"])
    fits = tasks.kinds_of_model(student["_target_"])
    if kind.name not in fits:
        raise UserError(
            f"{key} ({student['_target_']}) learns {', '.join(fits)}; the checkpoint's data is "
            f"{kind.name}: pick a student model for {kind.name} (model@{key}=...)"
        )


def check_checkpoint_exists(path) -> None:
    """Before torch is imported: the file is there."""
    from litlab.checkpointing.resume import refuse_empty

    refuse_empty(path)
    if not Path(str(path)).exists():
        raise UserError(f"ckpt_path={path}: no such checkpoint file")


def check_rebuilt(stored: dict, source, trust: bool, data_overrides: dict | None) -> None:
    """A stored run config a command rebuilds its run from, as it will be built (with this
    command's data overrides): it names only targets litlab's configs can name unless trusted,
    the overrides fit its data, and its model and data pass a command line's checks (a stored
    value this command overrides is not the file's fault)."""
    from litlab.checkpointing.trust import check_is_data, merged

    if not trust:
        check_is_data(merged(stored, data_overrides), source)
    if data_overrides:  # their keys and values, named as the command's
        check_data_overrides(data_overrides, stored.get("data") or {})
    if not trust:
        check_stored(merged(stored, data_overrides), source, data_overrides is not None)


def check_exported_to_rebuild(path, trust: bool, data_overrides: dict) -> None:
    """An exported file eval.py scores (`model_path`): its metadata names a run (the stored
    config src/export.py writes), checked as a checkpoint's stored config is, with this
    command's data overrides, and of the task kind the file says."""
    from litlab import tasks
    from litlab.checkpointing import exported
    from litlab.checkpointing.trust import ExportedFile

    run = exported.stored_run(path)
    check_rebuilt(run.config, ExportedFile(path), trust, dict(data_overrides))
    data = run.config.get("data") or {}
    theirs = tasks.kind_name_of_data(data.get("_target_"), "data") if "_target_" in data else None
    if theirs != run.kind:
        raise UserError(
            f"model_path={path}: its metadata says task kind {run.kind}, but its stored data "
            f"is {theirs}: not a file src/export.py wrote; re-export the checkpoint"
        )


def check_data_overrides(overrides: dict, stored: dict, key: str = "data_overrides") -> None:
    """`data_overrides` against the data config stored in the checkpoint: keys the datamodule
    takes (else one line listing them), values of its parameters' types and bounds (a batch
    size of 0 fails here, not in the loader)."""
    if "_target_" in overrides:
        raise UserError(
            f"{key}._target_: overrides change the stored data's settings, not its class "
            "(the model was trained on it); export or evaluate the run as trained"
        )
    _known_data_keys(overrides, stored, key)
    merged = OmegaConf.to_container(OmegaConf.merge(stored, overrides), resolve=True)
    refuse(node_errors(key, merged, {}))


def _known_data_keys(overrides: dict, stored: dict, key: str) -> None:
    """Each override names a setting of the checkpoint's datamodule: one line listing them."""
    try:
        params, _, open_ended = signature(import_target(stored["_target_"]))
    except Exception:  # not importable: its node's model says so, in its words
        return
    valid = sorted({*params, *stored} - {"_target_", "self"})
    unknown = [k for k in overrides if k not in valid]
    if unknown and not open_ended:
        name = str(unknown[0])
        match = closest(name, valid).replace("; did you mean", " (did you mean").rstrip("?")
        raise UserError(
            f"unknown key {key}.{name}{match + '?)' if match else ''}: the checkpoint's data "
            f"({stored['_target_'].rsplit('.', 1)[-1]}) has no '{name}'; valid: {', '.join(valid)}"
        )
