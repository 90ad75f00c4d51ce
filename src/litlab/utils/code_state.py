"""The state of the code that runs: git commit, uncommitted changes and a hash of src/ and
configs/; or, in a code snapshot (a sweep's copy, litlab.sweeps.snapshot), the state it was
taken from. Read by provenance (run dirs, checkpoints, eval.py) and by the snapshot itself.
Standard library only; git is optional."""

import hashlib
import json
import subprocess
from pathlib import Path

CODE_FILE = "CODE.json"  # in a code snapshot: the state it was taken from
CODE_DIRS = ("src", "configs")
CODE_ROOT = Path(__file__).resolve().parents[3]  # the folder that holds src/ and configs/
# the folder whose code this process runs: CODE_ROOT, or the snapshot a forked job switched to
_running = {"root": CODE_ROOT}


def run_from(root: Path) -> None:
    """This process now runs the code in `root` (a job forked from a launcher imports its
    snapshot: litlab.sweeps.snapshot.import_from), so its provenance names that code."""
    _running["root"] = Path(root)


def snapshot_origin(root: Path = CODE_ROOT) -> Path | None:
    """The project folder a snapshot was taken from (its data and logs live there), or None
    when this code is not a snapshot."""
    marker = root / CODE_FILE
    if not marker.is_file():
        return None
    origin = json.loads(marker.read_text()).get("project_root")
    return Path(origin) if origin else None


def _git(root: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def tree_hash(root: Path = CODE_ROOT) -> str:
    """SHA-256 over the paths and bytes of src/ and configs/ (no caches, no git needed)."""
    digest = hashlib.sha256()
    for folder in CODE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def git_state(root: Path = CODE_ROOT) -> dict:
    """Commit, dirty flag and diff hash of src/ and configs/ (None values without git)."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "diff_sha256": None}
    diff = _git(root, "diff", "HEAD", "--binary", "--", *CODE_DIRS) or b""
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z", "--", *CODE_DIRS)
    digest = hashlib.sha256(diff)
    for name in sorted(filter(None, (untracked or b"").split(b"\0"))):
        path = root / name.decode()
        if path.is_file():
            digest.update(name + b"\0" + path.read_bytes())
    dirty = bool(diff or untracked)
    return {
        "commit": commit.decode().strip(),
        "dirty": dirty,
        "diff_sha256": digest.hexdigest() if dirty else None,
    }


def code_state(root: Path | None = None) -> dict:
    """The state of the code in `root` (default: the code this process runs); in a snapshot,
    the state it was taken from plus where it is."""
    root = _running["root"] if root is None else root
    snapshot = root / CODE_FILE
    if snapshot.is_file():
        state = json.loads(snapshot.read_text())
        return {**state, "snapshot": str(root)}
    return {**git_state(root), "tree_sha256": tree_hash(root)}
