"""The run an exported ONNX file names (`eval.py model_path=`): src/export.py stores the run's
resolved config, its task kind, the net's input names and the checkpoint it came from in the
file's metadata, so the file can be scored on the run's own split without the checkpoint.
That metadata is data from elsewhere: read with bounds (JSON only, no value over
`MAX_VALUE_BYTES`), its keys checked for type and size, a task kind only looked up by name
among litlab's, and the stored config checked as a checkpoint's is before anything is built
from it. No torch at import."""

import json
from dataclasses import dataclass
from pathlib import Path

from litlab.checkpointing.trust import shown
from litlab.errors import UserError

#: the suffix of the files eval.py scores (model.onnx, model.int8.onnx)
SUFFIX = ".onnx"
#: one metadata value (the run config is a few kB; export's OOD model ~9 kB)
MAX_VALUE_BYTES = 4 << 20
#: the key of the task kind: "kind" in newer files, "task" in older ones
KIND_KEYS = ("kind", "task")
MAX_INPUTS, MAX_NAME = 16, 256
#: where `read` puts the names of the model's own inputs (not a metadata key)
INPUTS = " graph inputs"
HOW = "export the checkpoint with src/export.py (its model.onnx), or evaluate the checkpoint"


@dataclass(frozen=True)
class ExportedRun:
    config: dict  # the run's resolved config, as the checkpoint stored it
    kind: str  # the task kind's name (a kind litlab declares)
    input_names: list[str]  # the file's inputs, in order
    checkpoint: str | None  # the checkpoint the file was exported from (it may be gone)


def check_exists(path) -> None:
    """Before any import: a regular `.onnx` file (a checkpoint is told where it belongs)."""
    p = Path(str(path))
    if not str(path).strip():
        raise UserError("model_path= is empty; pass a model.onnx (or model.int8.onnx) file")
    if not p.exists():
        raise UserError(
            f"model_path={path}: no such file; pass a model.onnx (or model.int8.onnx) from "
            "src/export.py"
        )
    if not p.is_file():
        raise UserError(
            f"model_path={path} is not a regular file; pass a model.onnx (or model.int8.onnx)"
        )
    if p.suffix == ".ckpt":
        raise UserError(f"model_path={path} is a checkpoint; pass it as ckpt_path={path}")
    if p.suffix != SUFFIX:
        raise UserError(
            f"model_path={path}: eval.py scores ONNX files (model.onnx, model.int8.onnx from "
            f"src/export.py), not {p.suffix or 'a file without a suffix'}"
        )


def read(path) -> dict:
    """The file's metadata, each value JSON-decoded (a plain string stays a string), and the
    model's input names under `INPUTS`; one line when the file is no ONNX model or a value is
    too large."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # noqa: BLE001 (protobuf raises many types on a bad file)
        raise UserError(
            f"model_path={path} is not a readable ONNX file ({type(err).__name__}); pass a "
            "model.onnx (or model.int8.onnx) from src/export.py"
        ) from None
    if not model.graph.node or not model.opset_import:  # an empty or foreign protobuf parses
        raise UserError(
            f"model_path={path} holds no ONNX model; pass a model.onnx (or model.int8.onnx) "
            "from src/export.py"
        )
    initializers = {i.name for i in model.graph.initializer}
    meta = {INPUTS: [i.name for i in model.graph.input if i.name not in initializers]}
    for prop in model.metadata_props:
        if len(prop.value) > MAX_VALUE_BYTES:
            raise _bad(path, f"{shown(prop.key, 40)} is {len(prop.value):,} bytes")
        try:
            meta[prop.key] = json.loads(prop.value)
        except (ValueError, RecursionError):
            meta[prop.key] = prop.value
    return meta


def stored_run(path, meta: dict | None = None) -> ExportedRun:
    """What the file's metadata says of its run, checked for type and size (`meta`: already
    read). A file without a stored config names no run: one line saying what to do."""
    from litlab import tasks
    from litlab.checkpointing.load import renamed

    meta = read(path) if meta is None else meta
    config = meta.get("config")
    if config is None:
        raise UserError(
            f"model_path={path}: its metadata names no training run (no stored run config, "
            f"so no data split to score it on); {HOW} itself with ckpt_path=..."
        )
    if not isinstance(config, dict):
        raise _bad(path, f"config is a {type(config).__name__}, not a mapping of the run")
    kind = next((meta[k] for k in KIND_KEYS if k in meta), None)
    known = tasks.kinds()  # a lookup by name among litlab's own kinds: nothing is imported
    if not isinstance(kind, str) or kind not in known:
        raise _bad(path, f"its task kind is {shown(kind, 40)}; known: {', '.join(known)}")
    names = meta.get("input_names")
    if not (
        isinstance(names, list)
        and 0 < len(names) <= MAX_INPUTS
        and all(isinstance(n, str) and 0 < len(n) <= MAX_NAME for n in names)
    ):
        raise _bad(path, f"input_names is {shown(names, 80)}; expected a list of names")
    if names != meta.get(INPUTS, names):
        raise _bad(path, f"input_names is {shown(names, 80)}, the model takes {meta[INPUTS][:8]}")
    checkpoint = meta.get("checkpoint")
    if not (checkpoint is None or isinstance(checkpoint, str) and len(checkpoint) <= 4096):
        raise _bad(path, f"checkpoint is {shown(checkpoint, 40)}; expected a path")
    renamed(config)  # an export from before the domains' move: today's names
    return ExportedRun(config, kind, names, checkpoint)


def _bad(path, what: str) -> UserError:
    return UserError(
        f"model_path={path}: its litlab metadata is not usable: {what} (re-export the "
        "checkpoint with src/export.py)"
    )
