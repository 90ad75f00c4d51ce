"""The checkpoints a command names: the file exists, is a complete litlab checkpoint (read
weights_only, its tensors not read), of this model, names only targets litlab's configs can
name unless trusted, and its stored model and data pass the checks a command line's do.
One line (`UserError`) each; `config.validate` and the entry settings call them."""

from pathlib import Path

from omegaconf import OmegaConf

from litlab.config.messages import node_errors, refusal
from litlab.config.rules import stages
from litlab.errors import UserError


def check_checkpoint(
    path, cfg_model: dict | None, trust: bool = True, data_overrides: dict | None = None
) -> None:
    """The file exists, is a complete litlab checkpoint (weights_only), of this model, and
    (unless trusted) names only targets litlab's own configs can name."""
    from litlab.checkpointing import load as checkpoint
    from litlab.checkpointing.callback_states import check_callback_states
    from litlab.checkpointing.run_config import CONFIG_KEY
    from litlab.checkpointing.trust import check, merged

    p = Path(str(path))
    if p.is_dir():
        files = sorted(f.name for f in (p / "checkpoints").glob("*.ckpt")) or sorted(
            f.name for f in p.glob("*.ckpt")
        )
        raise UserError(
            f"ckpt_path={path} is a folder; pass a .ckpt file"
            + (f" such as {p / 'checkpoints' / files[0]}" if files else "")
        )
    ckpt = checkpoint.load(p, mmap=True)  # the tensors are not read
    stored = ckpt[CONFIG_KEY]
    check_callback_states(ckpt, str(path))  # a resume restores them: always
    if not trust:  # as load_run will build it: with this command's data overrides
        check(merged(stored, data_overrides), str(path))
        if cfg_model is None:  # eval, export, compress: the run is rebuilt from the file
            check_stored(stored, str(path))  # the file's own; overrides: check_data_overrides
    theirs = (stored.get("model") or {}).get("_target_")
    if cfg_model is not None and theirs != cfg_model.get("_target_"):
        raise UserError(
            f"ckpt_path={path} holds a {theirs} model; this run builds "
            f"{cfg_model.get('_target_')}: pick the matching model=... or checkpoint"
        )


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
        if errors := node_errors(key, student, {}):
            raise refusal(errors)
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


def check_checkpoint_to_rebuild(path, trust: bool, data_overrides: dict) -> None:
    """A checkpoint an entry point rebuilds its run from (eval, export): it exists, is a
    complete litlab checkpoint naming only allowed targets unless trusted, and the command's
    data overrides fit the data it stores."""
    check_checkpoint_exists(path)
    check_checkpoint(path, None, trust, dict(data_overrides))
    check_data_overrides(path, data_overrides)


def check_data_overrides(ckpt_path, overrides: dict | None, key: str = "data_overrides") -> None:
    """`data_overrides` against the data config stored in the checkpoint: keys the datamodule
    takes, values of its parameters' types and bounds (a batch size of 0 fails here, not in
    the loader)."""
    if not overrides:
        return
    if "_target_" in overrides:
        raise UserError(
            f"{key}._target_: overrides change the stored data's settings, not its class "
            "(the model was trained on it); export or evaluate the run as trained"
        )

    stored = stored_config(ckpt_path).get("data") or {}
    merged = OmegaConf.to_container(OmegaConf.merge(stored, overrides), resolve=True)
    if errors := node_errors(key, merged, {}):
        raise refusal(errors)


def check_stored(stored: dict, source: str) -> None:
    """The model and data a checkpoint's stored config builds pass the checks a command line's
    do (stages 2 to 4), so a file from elsewhere fails in one line naming the key, not deep
    inside a build, a loss or an export. `stored`: plain data (`trust.check` passed)."""
    from litlab.checkpointing.trust import shown

    where = f"ckpt_path={shown(source, 200)}: its stored config"
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
            raise UserError(f"{where} is not valid: {refusal(errors)}")
