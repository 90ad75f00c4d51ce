"""Jobs run the code they were submitted with.

A sweep sent to a launcher whose jobs start later (SLURM through submitit: minutes or days in
the queue; submitit's local stand-in) would otherwise import whatever src/ and configs/ hold
when each job starts: edits made meanwhile leak into queued jobs, and a sweep mixes code.
`take` copies src/ and configs/ into `<sweep dir>/code/<tree hash>/` (identical code: one copy)
with CODE.json (commit, uncommitted-diff hash, tree hash, the project folder) and the
uncommitted diff itself; `use` makes the jobs import that copy (PYTHONPATH, which submitit
passes on to the jobs) and compose their configs from it (the launcher's config search path).
Data and logs stay in the project folder (litlab.config.resolvers.PROJECT_ROOT).
"""

import json
import logging
import os
import shutil
import time
from pathlib import Path

from litlab.utils.code_state import CODE_DIRS, CODE_FILE, CODE_ROOT, code_state, snapshot_origin

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
        from litlab.utils.code_state import _git

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

    from litlab.utils.code_state import run_from

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
