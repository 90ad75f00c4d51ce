"""Checks across a run's config groups, and of the files it names: what no single target's
signature can say (the monitored metric exists and is computed; there is something to train;
folders and checkpoints exist, are litlab's, of this model, and name only allowed targets).
Used by `config.validate`; one line (`UserError`) each."""

import re
from pathlib import Path

from litlab.errors import UserError


def check_monitor(c: dict) -> None:
    """The monitored metric is one the model logs, and it is computed in this run."""
    import hydra

    model_cls = hydra.utils.get_class(c["model"]["_target_"])
    names = getattr(model_cls, "monitorable", None)
    keys = [("model.monitor", c["model"].get("monitor"))]
    for k, v in (c.get("callbacks") or {}).items():
        if isinstance(v, dict) and v.get("monitor"):
            keys.append((f"callbacks.{k}.monitor", v["monitor"]))
        if isinstance(v, dict) and isinstance(v.get("monitors"), dict):  # joint selection
            keys += [(f"callbacks.{k}.monitors", name) for name in v["monitors"]]
    for key, value in keys:
        if value and callable(names) and not names(value):
            valid = ", ".join(model_cls.monitor_examples())
            raise UserError(
                f"{key}={value} is not a metric {model_cls.__name__} logs; valid: {valid}"
            )
    t, monitor = c["trainer"], str(c["model"].get("monitor") or "")
    no_val = t.get("limit_val_batches") == 0 or (
        isinstance(t.get("check_val_every_n_epoch"), int)
        and isinstance(t.get("max_epochs"), int)
        and 0 < t["max_epochs"] < t["check_val_every_n_epoch"]
    )
    if c.get("train") and monitor.startswith("val/") and no_val:
        raise UserError(
            f"model.monitor={monitor} but this run never validates "
            f"(trainer.limit_val_batches={t.get('limit_val_batches')}, "
            f"check_val_every_n_epoch={t.get('check_val_every_n_epoch')}); "
            f"validate, or set model.monitor=train/loss model.monitor_mode=min"
        )


def check_run(c: dict) -> None:
    if not c.get("train") and not c.get("test"):
        raise UserError("train=false and test=false: nothing to do; set train=true or test=true")
    if not c.get("train") and not c.get("ckpt_path"):
        raise UserError(
            "train=false tests an untrained model; pass ckpt_path=<.ckpt file or "
            "run dir> (or use src/eval.py ckpt_path=...)"
        )
    if c.get("train") and c["trainer"].get("limit_train_batches") in (0, 0.0):
        raise UserError(
            "trainer.limit_train_batches=0 trains nothing; use a fraction in (0, 1] "
            "or a number of batches >= 1 (or train=false ckpt_path=... to only test)"
        )


# ---------------------------------------------------------------- files
def check_paths(data: dict) -> None:
    if data.get("root") is not None and not Path(str(data["root"])).is_dir():
        raise UserError(
            f"data.root={data['root']} is not an existing folder; point it at your data"
        )
    if data.get("download") is False:
        for key, value in data.items():
            if key.endswith("_dir") and value is not None and not Path(str(value)).is_dir():
                raise UserError(
                    f"data.{key}={value} does not exist and data.download=false; "
                    f"point it at the folder that holds the data (or download=true)"
                )


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
    if cfg_model is None and data_overrides:  # their keys and values, named as the command's
        check_data_overrides(path, data_overrides, stored=stored.get("data"))
    if not trust and cfg_model is None:  # eval, export, compress: the run is rebuilt from it
        # as it will be built: a stored value this command overrides is not the file's fault
        check_stored(merged(stored, data_overrides), str(path), data_overrides is not None)
    theirs = (stored.get("model") or {}).get("_target_")
    if cfg_model is not None and theirs != cfg_model.get("_target_"):
        raise UserError(
            f"ckpt_path={path} holds a {theirs} model; this run builds "
            f"{cfg_model.get('_target_')}: pick the matching model=... or checkpoint"
        )


def check_stored(stored: dict, source: str, overridable: bool = False) -> None:
    """The model and data a checkpoint's stored config builds pass the checks a command line's
    do (signatures and bounds, model against data, the monitored metric), so a file from
    elsewhere fails in one line naming the key, not deep inside a build, a loss or an export.
    `stored` is plain data (`trust.check` passed, or resolved from a trusted file);
    `overridable`: the command takes `data_overrides`, and a bad data key says how to use them."""
    from omegaconf import OmegaConf

    from litlab.checkpointing.trust import named
    from litlab.config import targets
    from litlab.config.build import check_compatible

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
    try:
        targets.walk_plain("", {"model": model, "data": data})
        kinds = {"model": {"_target_": model["_target_"]}, "data": {"_target_": data["_target_"]}}
        check_compatible(OmegaConf.create(kinds))
        targets.check_node("model", model)
        targets.check_node("data", data)
        targets.check_optimizer(model)
        check_monitor({"model": model, "trainer": {}, "train": False})
    except UserError as err:
        raise UserError(
            f"{where} is not valid: {err}{_override_hint(str(err), overridable)}"
        ) from None


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


def stored_config(path) -> dict:
    """The run config inside a checkpoint (its tensors are not read)."""
    from litlab.checkpointing import load as checkpoint
    from litlab.checkpointing.run_config import CONFIG_KEY

    return checkpoint.load(path, mmap=True)[CONFIG_KEY]


def check_student(student: dict, stored: dict, key: str) -> None:
    """A distillation student (a model config, or keys merged onto the teacher's) can be built
    and learns the checkpoint's task kind: told before the original model is tested."""
    from omegaconf import OmegaConf

    from litlab import tasks
    from litlab.config import targets

    if "_target_" not in student:
        student = OmegaConf.to_container(OmegaConf.merge(stored["model"], student), resolve=True)
        targets.check_node(key, student)
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


def check_exported_to_rebuild(path, trust: bool, data_overrides: dict) -> None:
    """An exported file eval.py scores (`model_path`): its metadata names a run (the stored
    config src/export.py writes), checked as a checkpoint's stored config is, with this
    command's data overrides, and of the task kind the file says."""
    from litlab import tasks
    from litlab.checkpointing import exported
    from litlab.checkpointing.trust import ExportedFile, check, merged

    run = exported.stored_run(path)
    source, overrides = ExportedFile(path), dict(data_overrides)
    if not trust:
        check(merged(run.config, overrides), source)
    if overrides:
        check_data_overrides(path, overrides, stored=run.config.get("data"))
    if not trust:
        check_stored(merged(run.config, overrides), source, True)
    data = run.config.get("data") or {}
    theirs = tasks.kind_name_of_data(data.get("_target_"), "data") if "_target_" in data else None
    if theirs != run.kind:
        raise UserError(
            f"model_path={path}: its metadata says task kind {run.kind}, but its stored data "
            f"is {theirs}: not a file src/export.py wrote; re-export the checkpoint"
        )


def check_data_overrides(
    ckpt_path, overrides: dict | None, key: str = "data_overrides", stored: dict | None = None
) -> None:
    """`data_overrides` against the data config stored in the checkpoint (`stored`: already
    read): keys the datamodule takes (else one line listing them), values of its parameters'
    types and bounds (a batch size of 0 fails here, not in the loader)."""
    if not overrides:
        return
    if "_target_" in overrides:
        raise UserError(
            f"{key}._target_: overrides change the stored data's settings, not its class "
            "(the model was trained on it); export or evaluate the run as trained"
        )
    from omegaconf import OmegaConf

    from litlab.config import targets

    stored = (stored_config(ckpt_path).get("data") or {}) if stored is None else stored
    _known_data_keys(overrides, stored, key)
    merged = OmegaConf.merge(stored, overrides)
    targets.check_node(key, OmegaConf.to_container(merged, resolve=True))


def _known_data_keys(overrides: dict, stored: dict, key: str) -> None:
    """Each override names a setting of the checkpoint's datamodule: one line listing them."""
    import hydra

    from litlab.config.signatures import closest, signature

    try:
        params, _, open_ended = signature(hydra.utils.get_class(stored["_target_"]))
    except Exception:  # noqa: BLE001  (not importable: check_node says so, in its words)
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
