"""The state of the code that runs: git commit, uncommitted changes and a hash of src/ and
configs/; or, in a code snapshot (a sweep's copy, litlab.utils.code_state), the state it was
taken from. Read by provenance (run dirs, checkpoints, eval.py) and by the snapshot itself.
Standard library only; git is optional.

Jobs run the code they were submitted with.

A sweep sent to a launcher whose jobs start later (SLURM through submitit: minutes or days in
the queue; submitit's local stand-in) would otherwise import whatever src/ and configs/ hold
when each job starts: edits made meanwhile leak into queued jobs, and a sweep mixes code.
`take` copies src/ and configs/ into `<sweep dir>/code/<tree hash>/` (identical code: one copy)
with CODE.json (commit, uncommitted-diff hash, tree hash, the project folder) and the
uncommitted diff itself; `use` makes the jobs import that copy (PYTHONPATH, which submitit
passes on to the jobs) and compose their configs from it (the launcher's config search path).
Data and logs stay in the project folder (litlab.config.resolvers.PROJECT_ROOT)."""

import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

CODE_FILE = "CODE.json"  # in a code snapshot: the state it was taken from
CODE_DIRS = ("src", "configs")
CODE_ROOT = Path(__file__).resolve().parents[3]  # the folder that holds src/ and configs/
# the folder whose code this process runs: CODE_ROOT, or the snapshot a forked job switched to
_running = {"root": CODE_ROOT}


def run_from(root: Path) -> None:
    """This process now runs the code in `root` (a job forked from a launcher imports its
    snapshot: litlab.utils.code_state.import_from), so its provenance names that code."""
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


# -------------------------------------------------------------- snapshot
log = logging.getLogger(__name__)
SNAPSHOTS = "code"  # under the sweep dir


def take(sweep_dir, root: Path = CODE_ROOT) -> Path:
    """A copy of src/ and configs/ of `root` in the sweep dir (reused when the code is the
    same); a snapshot of a snapshot is that snapshot again."""
    state = code_state(root)
    if "snapshot" in state:  # already running from one: its jobs keep that code
        return Path(state["snapshot"])
    target = Path(sweep_dir) / SNAPSHOTS / state["tree_sha256"][:12]
    if (target / CODE_FILE).is_file():
        return target
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    for folder in CODE_DIRS:
        shutil.copytree(
            root / folder, partial / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    if state.get("dirty"):
        diff = _git(root, "diff", "HEAD", "--binary", "--", *CODE_DIRS) or b""
        (partial / "uncommitted.diff").write_bytes(diff)
    record = {**state, "project_root": str(snapshot_origin(root) or root), "taken": time.time()}
    (partial / CODE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    try:
        partial.rename(target)  # whole or not at all: two launchers may race
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
    log.info("jobs run the code snapshot %s (commit %s)", target, state.get("commit"))
    return target


def use(snapshot: Path, config_loader, root: Path = CODE_ROOT) -> None:
    """Point the jobs at the snapshot: its src/ first on PYTHONPATH (the project's src/ off it)
    and its configs/ in place of the project's in the config search path."""
    src, old_src = str(snapshot / "src"), str(root / "src")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [src, *(p for p in paths if p not in (src, old_src))]
    )
    from litlab.compat.hydra import config_repository

    configs = {f"file://{root / 'configs'}", str(root / "configs")}
    search_path = config_loader.config_search_path
    for element in search_path.get_path():
        if element.path in configs:
            element.path = f"file://{snapshot / 'configs'}"
    config_loader.repository = config_repository(search_path)


def import_from(snapshot: Path, root: Path = CODE_ROOT) -> None:
    """In a job forked from the launcher: every module not imported yet comes from the snapshot
    (sys.path, and the search path of the packages already imported from `root`/src), and the
    job's provenance names the snapshot, as for a job started as a fresh interpreter there."""
    import sys

    src, old_src = str(snapshot / "src"), str(root / "src")
    sys.path[:] = [src, *(p for p in sys.path if p not in (src, old_src))]
    for module in list(sys.modules.values()):
        path = getattr(module, "__path__", None)
        if isinstance(path, list) and any(p.startswith(old_src + os.sep) for p in path):
            module.__path__ = [
                src + p[len(old_src) :] if p.startswith(old_src + os.sep) else p for p in path
            ]
    sys.path_importer_cache.clear()
    run_from(snapshot)
