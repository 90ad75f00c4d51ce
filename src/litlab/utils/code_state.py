"""The state of the code that runs: git commit, uncommitted changes and a hash of src/ and
configs/; or, in a code snapshot (a sweep's copy), the state it was taken from. Read by
provenance (run dirs, checkpoints, eval.py) and by the snapshot itself. Standard library only;
git is optional.

Jobs run the code they were submitted with. A sweep sent to a launcher whose jobs start later
(SLURM through submitit: minutes or days in the queue; submitit's local stand-in) would
otherwise import whatever src/ and configs/ hold when each job starts: edits made meanwhile
leak into queued jobs, and a sweep mixes code. `take` copies src/ and configs/ into
`<sweep dir>/code/<tree hash>/` (identical code: one copy) with CODE.json (commit,
uncommitted-diff hash, tree hash, the project folder) and the uncommitted diff itself; `use`
makes the jobs import that copy (PYTHONPATH, which submitit passes on to the jobs) and compose
their configs from it (the launcher's config search path). Data and logs stay in the project
folder (litlab.config.resolvers.PROJECT_ROOT).

A snapshot found in the sweep dir (a resume, another launch of the same sweep) is run only
when it is what `take` writes (`check_snapshot`): no links, no other files, src/ and configs/
hashing to the tree hash its CODE.json records, and that record the state of the code being
launched (commit, diff, tree, project folder). A crafted or altered snapshot would otherwise
be imported by every job (and a planted `.pyc` beside a source file, which the tree hash does
not cover, run first): it is refused in one line naming the file. Its bytecode caches are
cleared before it is reused: Python would run a cached `.pyc` whose header matches the source."""

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from litlab.errors import UserError

CODE_FILE = "CODE.json"  # in a code snapshot: the state it was taken from
CODE_DIRS = ("src", "configs")
CODE_ROOT = Path(__file__).resolve().parents[3]  # the folder that holds src/ and configs/
CACHE = "__pycache__"
# the folder whose code this process runs: CODE_ROOT, or the snapshot a forked job switched to
_running = {"root": CODE_ROOT}


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


def code_files(root: Path) -> list[Path]:
    """The files of src/ and configs/ (relative to `root`, each folder's sorted), no caches."""
    return [
        path.relative_to(root)
        for folder in CODE_DIRS
        for path in sorted((root / folder).rglob("*"))
        if path.is_file() and CACHE not in path.parts and path.suffix != ".pyc"
    ]


def tree_hash(root: Path = CODE_ROOT) -> str:
    """SHA-256 over the paths and bytes of src/ and configs/ (no caches, no git needed)."""
    digest = hashlib.sha256()
    for rel in code_files(root):
        digest.update(str(rel).encode() + b"\0" + (root / rel).read_bytes())
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
        return {**json.loads(snapshot.read_text()), "snapshot": str(root)}
    return {**git_state(root), "tree_sha256": tree_hash(root)}


# -------------------------------------------------------------- snapshot
log = logging.getLogger(__name__)
SNAPSHOTS = "code"  # under the sweep dir
NAME = re.compile(r"[0-9a-f]{12}")  # a snapshot's folder: its tree hash's first 12 digits
PARTIAL = re.compile(r"[0-9a-f]{12}\.partial-\d+")  # a copy cut short (never used)
DIFF_FILE = "uncommitted.diff"
TOP = frozenset({*CODE_DIRS, CODE_FILE, DIFF_FILE})
RECORDED = ("commit", "dirty", "diff_sha256", "tree_sha256", "project_root")
MAX_RECORD = 2**20


def take(sweep_dir, root: Path = CODE_ROOT) -> Path:
    """A copy of src/ and configs/ of `root` in the sweep dir (reused when the code is the
    same); a snapshot of a snapshot is that snapshot again."""
    state = code_state(root)
    if "snapshot" in state:  # already running from one: its jobs keep that code
        return Path(state["snapshot"])
    origin = str(snapshot_origin(root) or root)
    folder = Path(sweep_dir) / SNAPSHOTS
    _no_link(folder)
    target = folder / state["tree_sha256"][:12]
    if os.path.lexists(target):
        launched = {**state, "project_root": origin}
        _restate(target, check_snapshot(target, launched, root), launched)
        _clear_caches(target)
        return target
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    if os.path.islink(partial):  # never copied through: it would write where it leads
        partial.unlink()
    shutil.rmtree(partial, ignore_errors=True)
    for folder in CODE_DIRS:
        shutil.copytree(
            root / folder, partial / folder, ignore=shutil.ignore_patterns(CACHE, "*.pyc")
        )
    if state.get("dirty"):
        diff = _git(root, "diff", "HEAD", "--binary", "--", *CODE_DIRS) or b""
        (partial / DIFF_FILE).write_bytes(diff)
    record = {**state, "project_root": origin, "taken": time.time()}
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
    src, old_src = str(snapshot / "src"), str(root / "src")
    sys.path[:] = [src, *(p for p in sys.path if p not in (src, old_src))]
    for module in list(sys.modules.values()):
        path = getattr(module, "__path__", None)
        if isinstance(path, list) and any(p.startswith(old_src + os.sep) for p in path):
            module.__path__ = [
                src + p[len(old_src) :] if p.startswith(old_src + os.sep) else p for p in path
            ]
    sys.path_importer_cache.clear()
    _running["root"] = Path(snapshot)


def _refusal(path: Path, why: str) -> UserError:
    """One line naming `path`, and the snapshot folder (or code/ itself) to move away."""
    moved = next((p for p in (path, *path.parents) if p.parent.name == SNAPSHOTS), path)
    return UserError(
        f"{path}: {why}; a sweep's code snapshot is run only as litlab wrote it (its jobs would "
        f"import it): move {moved} away, or give this sweep a new hydra.sweep.dir (or none: a "
        f"new timestamped one)"
    )


def _no_link(path: Path) -> None:
    if os.path.islink(path):
        raise _refusal(path, f"it is a symbolic link to {os.readlink(path)}")
    if os.path.lexists(path) and not path.is_dir():
        raise _refusal(path, "it is not a folder")


def _walk_files(snapshot: Path):
    """Every file of the snapshot (relative paths), refusing links, hard links, special files,
    bytecode outside a cache folder, and top-level entries `take` does not write."""
    for entry in sorted(os.listdir(snapshot)):
        if entry not in TOP:
            raise _refusal(snapshot / entry, "a code snapshot holds no such file")
    for folder, dirs, files in os.walk(snapshot):  # a linked folder is listed, never entered
        for name in sorted([*dirs, *files]):
            path = Path(folder) / name
            try:
                st = path.lstat()
            except FileNotFoundError:  # a cache file another worker's job just replaced
                continue
            if stat.S_ISLNK(st.st_mode):
                raise _refusal(path, f"it is a symbolic link to {os.readlink(path)}")
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise _refusal(path, "it is not a regular file")
            if st.st_nlink > 1:
                raise _refusal(path, "it is a hard link (the same file has other names)")
            if path.suffix == ".pyc" and path.parent.name != CACHE:
                raise _refusal(path, "bytecode outside __pycache__ is never part of a snapshot")
            yield path.relative_to(snapshot)


def _record(snapshot: Path) -> dict:
    path = snapshot / CODE_FILE
    if not path.is_file():
        raise _refusal(path, "it is missing")
    if path.stat().st_size > MAX_RECORD:
        raise _refusal(path, f"it is over its limit of {MAX_RECORD} bytes")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _refusal(path, "it is not JSON") from None
    tree = record.get("tree_sha256") if isinstance(record, dict) else None
    if not isinstance(tree, str) or not re.fullmatch(r"[0-9a-f]{64}", tree):
        raise _refusal(path, "it records no tree_sha256 (64 hex digits)")
    if not tree.startswith(snapshot.name):
        raise _refusal(path, f"its tree_sha256 {tree[:12]}... is not its folder's name")
    return record


def _first_difference(snapshot: Path, root: Path, files: list[Path]) -> Path | None:
    """The first file of src/ and configs/ that differs between the snapshot and `root`."""
    theirs = set(code_files(root))
    ours = {p for p in files if CACHE not in p.parts and p.parts[0] in CODE_DIRS}
    for rel in sorted(ours ^ theirs):
        return snapshot / rel
    for rel in sorted(ours):
        if (snapshot / rel).read_bytes() != (root / rel).read_bytes():
            return snapshot / rel
    return None


def check_snapshot(snapshot: Path, expected: dict | None = None, root: Path = CODE_ROOT) -> dict:
    """One `UserError` naming the file unless `snapshot` is as `take` wrote it: a folder, no
    links, only its files, src/ and configs/ hashing to its CODE.json's tree_sha256; with
    `expected` (the state being launched), the same tree and project folder. Its record."""
    _no_link(snapshot)
    if not NAME.fullmatch(snapshot.name):
        raise _refusal(snapshot, "it is not a code snapshot's folder (12 hex digits)")
    files = list(_walk_files(snapshot))
    record = _record(snapshot)
    for key in RECORDED[-2:] if expected is not None else ():  # what runs, and where
        if record.get(key) != expected.get(key):
            raise _refusal(
                snapshot / CODE_FILE,
                f"its {key} is {str(record.get(key))[:80]!r}, the code launched has "
                f"{str(expected.get(key))[:80]!r}",
            )
    if tree_hash(snapshot) != record["tree_sha256"]:
        same = expected is not None or tree_hash(root) == record["tree_sha256"]
        differs = _first_difference(snapshot, root, files) if same else None
        raise _refusal(
            differs or snapshot / CODE_FILE,
            "its src/ and configs/ differ from the tree_sha256 its CODE.json records"
            if differs is None
            else "it differs from the code it was taken from (the snapshot was altered)",
        )
    return record


def _restate(snapshot: Path, record: dict, state: dict) -> None:
    """The same code under another commit (committed since, or the diff's other files):
    its record says the state being launched, so that new jobs' provenance is true."""
    if all(record.get(k) == state.get(k) for k in RECORDED):
        return
    path = snapshot / CODE_FILE
    tmp = path.with_name(f".{CODE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**record, **{k: state.get(k) for k in RECORDED}}, indent=2) + "\n")
    tmp.replace(path)


def check_folder(folder: Path, root: Path = CODE_ROOT) -> None:
    """The sweep dir's code/ folder (a resume's check, before anything is written): every
    snapshot in it as `take` wrote it (`check_snapshot`); copies cut short are never used."""
    _no_link(folder)
    for name in sorted(os.listdir(folder)):
        if not PARTIAL.fullmatch(name):
            check_snapshot(folder / name, root=root)


def _clear_caches(snapshot: Path) -> None:
    """Bytecode caches go before a snapshot is reused: the tree hash does not cover them."""
    for folder, dirs, _ in os.walk(snapshot):
        if CACHE in dirs:
            shutil.rmtree(Path(folder) / CACHE, ignore_errors=True)
            dirs.remove(CACHE)
