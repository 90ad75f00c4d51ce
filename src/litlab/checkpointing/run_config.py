"""What a run was made with, in every checkpoint and in its run dir.

`RunConfigInCheckpoint` stores the run's resolved config (plain dicts and lists) in every
checkpoint, so eval.py, export and resume rebuild the exact data split and model from it, and
it still loads with `torch.load(..., weights_only=True)`.

`provenance.json` (in the run dir, written by rank 0 when training starts) holds `code` (the
git commit, whether src/ and configs/ had uncommitted changes, the SHA-256 of that diff, and
`tree_sha256`, a hash of their files that needs no git; a run started from a code snapshot
reports the snapshot's state: litlab.utils.code_state), `packages` (the versions a result
depends on), `data` (SHA-256 of the files the datamodule reads) and `typed_paths` (the data
paths given relative on the command line, as typed; the config holds them absolute). So a
result can be traced back and a queued job's code told apart from today's. Checkpoints carry
`code` and `packages` (key `litlab_provenance`); eval.py compares them with the code it runs
(`code_note`). Standard library only; git is optional."""

import contextlib
import hashlib
import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from litlab.utils.code_state import code_state

CONFIG_KEY = "litlab_config"


class RunConfigInCheckpoint(Callback):
    """`provenance`: the code and package versions of the run (litlab.checkpointing.run_config),
    stored beside the config, so eval.py can say when its code differs."""

    def __init__(self, config: dict[str, Any], provenance: dict[str, Any] | None = None):
        # a config composed with Hydra's own node (tests, the compose API) stores it without:
        # Hydra's settings are never part of a run, and loaders refuse a stored `hydra` node
        self.config = {k: v for k, v in config.items() if k != "hydra"}
        self.provenance = provenance

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint[CONFIG_KEY] = self.config
        if self.provenance is not None:
            checkpoint[KEY] = self.provenance


# ------------------------------------------------------------ provenance
FILE = "provenance.json"
KEY = "litlab_provenance"
TYPED = "typed_paths"
PACKAGES = (
    "torch",
    "lightning",
    "torchmetrics",
    "torchvision",
    "torch-geometric",
    "monai",
    "hydra-core",
    "omegaconf",
    "numpy",
    "scikit-learn",
    "optuna",
)
HASH_LIMIT = 2 * 1024**3  # data bytes hashed per run; larger sets record sizes only


def package_versions() -> dict:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def data_checksums(datamodule) -> dict:
    """{path: sha256} of the files the datamodule reads: its `source_files()` when it has one,
    else the files under its `root` setting; past HASH_LIMIT bytes, `size=<bytes>` only."""
    source = getattr(datamodule, "source_files", None)
    if callable(source):
        paths = [Path(p) for p in source()]
    else:
        root = getattr(getattr(datamodule, "hparams", {}), "get", lambda _k: None)("root")
        paths = [Path(str(root))] if root else []
    checksums, budget = {}, HASH_LIMIT
    for path in (f for p in paths if p.exists() for f in _files(p)):
        size = path.stat().st_size
        if size > budget:
            checksums[str(path)] = f"size={size}"
            continue
        budget -= size
        with open(path, "rb") as f:
            checksums[str(path)] = hashlib.file_digest(f, "sha256").hexdigest()
    return checksums


def collect(datamodule=None) -> dict:
    """Everything above, as plain values (they go into weights-only checkpoints)."""
    record = {"code": code_state(), "packages": package_versions()}
    if datamodule is not None:
        record["data"] = data_checksums(datamodule)
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        record["slurm_job_id"] = job
    return record


def write_provenance(run_dir, record: dict, subdir: str | None = None) -> Path:
    """provenance.json in the run dir; a resumed run (whose run dir has one) writes its own
    into its config folder (`subdir`, e.g. .hydra/resume-<time>) and keeps the first."""
    path = Path(run_dir) / FILE
    if path.exists() and subdir:
        path = Path(run_dir) / subdir / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


# what `collect` writes under `code` (code_state), by key: unknown keys may be any plain value
CODE_TYPES = {"commit": str, "dirty": bool, "diff_sha256": str, "tree_sha256": str, "snapshot": str}


def check_record(record, source: str) -> None:
    """A checkpoint's provenance (absent in older files) is a mapping whose `code` and
    `packages` are mappings of the plain values `collect` writes: one line otherwise (eval.py
    compares them with this code)."""
    from litlab.checkpointing.trust import shown
    from litlab.errors import UserError

    what = None
    if record is not None and not isinstance(record, dict):
        what = f"is a {type(record).__name__}, not a mapping"
    for part in ("code", "packages") if isinstance(record, dict) else ():
        value = record.get(part)
        if value is not None and not isinstance(value, dict):
            what = f"has {part} of type {type(value).__name__}, not a mapping"
        for key, item in (value or {}).items() if isinstance(value, dict) else ():
            kind = str if part == "packages" else CODE_TYPES.get(key, str | int | float | bool)
            if item is not None and not isinstance(item, kind):
                what = f"has {part}.{shown(key)} of type {type(item).__name__}"
                break
        if what:
            break
    if what is not None:
        raise UserError(
            f"ckpt_path={shown(source, 200)}: its provenance ('{KEY}') {what}, as litlab's "
            "train.py never writes it"
        )


def _describe(code: dict) -> str:
    commit = str(code.get("commit") or "no git commit")[:12]
    if code.get("dirty"):
        return f"{commit} + uncommitted changes {str(code.get('diff_sha256'))[:12]}"
    return commit


def code_note(stored: dict | None) -> str | None:
    """One line when the code that runs now differs from the code that wrote a checkpoint
    (None when it is the same, or the checkpoint does not say)."""
    code = (stored or {}).get("code") or {}
    if not code.get("tree_sha256"):
        return None
    now = code_state()
    if now.get("tree_sha256") == code["tree_sha256"]:
        return None
    return (
        f"note: this code differs from the code that trained the checkpoint "
        f"(trained with {_describe(code)}, now {_describe(now)}); results can differ"
    )
