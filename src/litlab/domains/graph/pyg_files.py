"""Where PyG's files of the Planetoid and TUDataset collections are read and written: raw files
in `<data_dir>/<collection>/<name>/raw` (downloaded there when online), processed files in
`<data_dir>/cache/pyg/<collection>`, a folder litlab owns: never beside the raw files, whose
folder may be a read-only copy or a link to a shared one."""

import os
import urllib.error
from pathlib import Path

# isort: split
from torch_geometric.datasets import Planetoid, TUDataset

from litlab.errors import UserError
from litlab.utils.files import fetching


def pyg_cache(data_dir: Path, collection: str) -> Path:
    """Where PyG's processed files of a `collection` (Planetoid, TUDataset) go: a folder litlab
    owns below the data dir (`<data_dir>/cache/pyg/Planetoid/Cora/processed`), never the raw
    data's folder (`<data_dir>/Planetoid/Cora/raw`), which may be read-only."""
    return Path(data_dir) / "cache" / "pyg" / collection


class _ProcessedInCache:
    """A PyG dataset whose processed files go to `self.cache`, in PyG's own layout below it
    (`<name>/processed`, `<name>/geom-gcn/processed`...); its raw files stay where they are."""

    cache: str

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.cache, os.path.relpath(super().processed_dir, self.root))


class CachedPlanetoid(_ProcessedInCache, Planetoid):
    def __init__(self, root: str, name: str, cache: str, **kwargs):
        self.cache = cache  # before PyG's __init__, which processes
        super().__init__(root, name, **kwargs)


class CachedTUDataset(_ProcessedInCache, TUDataset):
    def __init__(self, root: str, name: str, cache: str, **kwargs):
        self.cache = cache
        super().__init__(root, name, **kwargs)


def _locked(cache: Path):
    """An inter-process lock in the dataset's cache folder: DDP ranks may build `dims` at the
    same time, and PyG writes processed files the first time a dataset is read."""
    from filelock import FileLock

    return FileLock(str(cache / ".litlab.lock"))


def _make_cache(cache: Path, raw: Path) -> None:
    """The cache folder, or one line: the data dir must be writable (its raw folders may be
    read-only)."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"PyG's processed files of {raw.parent} go to {cache}, which cannot be created "
            f"({err.strerror or err}); point paths.data_dir (or LITLAB_DATA_DIR) at a writable "
            f"folder that holds a copy of {raw.parent.parent.name}/{raw.parent.name}/raw or a "
            f"link to it (that folder itself may be read-only)"
        ) from None


def read_pyg(data_dir: Path, collection: str, name: str, raw_files: str, read):
    """`read(root, cache)` (a PyG dataset of `<data_dir>/<collection>`, processed into
    `cache`) under the cache's lock, downloading into `<root>/<name>/raw` when the files are
    not there; a failed download is one line that says which files to copy where (how to run
    offline), and leaves no folder it created."""
    root, cache = Path(data_dir) / collection, pyg_cache(data_dir, collection)
    try:
        with fetching(root / name / "raw"), fetching(cache):
            _make_cache(cache, root / name / "raw")
            with _locked(cache):
                return read(str(root), str(cache))
    except (urllib.error.URLError, OSError) as err:
        raise UserError(
            f"{name} is not in {root / name / 'raw'} and downloading it failed ({err}); "
            f"connect to the internet once, copy the {raw_files} files there, or pass "
            f"paths.data_dir=FOLDER (or set LITLAB_DATA_DIR) where {collection}/{name} "
            f"already is"
        ) from err
