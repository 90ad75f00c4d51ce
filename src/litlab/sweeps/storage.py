"""Where an Optuna study lives: a SQLite file in the sweep dir (one machine), or a database
server that workers on many machines share (PostgreSQL: docs/sweeps.md).

A SQLite file is opened only when it is one the study may write (`check_sqlite`): a regular
file (never through a link, nor its journal), new or empty, or a SQLite database that is an
Optuna storage or has no tables yet. Any other file (the user's notes, another program's
database, whose tables Optuna would add its own to) is refused in one line naming it.
"""

import os
import stat
from pathlib import Path

from litlab.errors import UserError, one_line


def storage_for(url: str | None, sweep_dir: Path, heartbeat_interval: int | None):
    """RDB storage at `url`, or a SQLite file in the sweep dir; waits on a busy SQLite file."""
    import time

    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    url = url or f"sqlite:///{(sweep_dir / 'optuna.db').resolve()}"
    check_sqlite(url)
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    heartbeat = (
        {"heartbeat_interval": heartbeat_interval, "grace_period": 3 * heartbeat_interval}
        if heartbeat_interval
        else {}
    )
    for attempt in range(5):
        try:
            return url, optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **heartbeat)
        except ModuleNotFoundError as err:  # e.g. mysql:// without its driver
            raise UserError(
                f"hydra.sweeper.storage={hide_password(url)}: its database driver is not "
                f"installed ({err}); PostgreSQL URLs use psycopg (requirements.txt)"
            ) from None
        except SQLAlchemyError as err:  # workers started together race to create the tables
            if attempt == 4:
                raise UserError(
                    f"hydra.sweeper.storage={hide_password(url)}: cannot use the study's "
                    f"database ({one_line(err, limit=200)}); check that the server runs and "
                    f"the URL (user, password, host, database) is right"
                ) from None
            time.sleep(0.5 * (attempt + 1))


def hide_password(url: str) -> str:
    """The URL with its password as `***`. Plain text, not a URL parser: a password holding an
    unencoded `@` or `/` (not a valid URL, so any parser splits it wrongly and shows its rest)
    is hidden whole, up to the last `@` before the query."""
    head, sep, query = url.partition("?")
    scheme, colon_slashes, rest = head.partition("://")
    if not colon_slashes or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user, has_password, _ = credentials.partition(":")
    return f"{scheme}://{user}{':***' if has_password else ''}@{host}{sep}{query}"


SQLITE_MAGIC = b"SQLite format 3\x00"
OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})  # in every Optuna storage


def _sqlite_path(url: str) -> Path | None:
    """The file of a `sqlite:///<path>` URL (None: another database, or in memory)."""
    if not url.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url).database
    except Exception:  # noqa: BLE001  (a malformed URL: SQLAlchemy says so when it opens it)
        return None
    return Path(database) if database and database != ":memory:" else None


def _tables(path: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def check_sqlite(url: str) -> None:
    """One `UserError` naming the file unless the SQLite file of `url` is one an Optuna study
    may be written into (see the module docstring); other URLs pass."""
    path = _sqlite_path(url)
    if path is None:
        return
    head = f"hydra.sweeper.storage={hide_password(url)}"
    valid = "give a new file, or the database of an Optuna study"
    for extra in ("", "-journal", "-wal", "-shm"):
        file = Path(f"{path}{extra}")
        try:
            st = os.lstat(file)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UserError(
                f"{head}: {file} is a symbolic link to {os.readlink(file)}; a study's database "
                f"is written only where it is, never through a link: {valid}"
            )
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{head}: {file} is not a regular file; {valid}")
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        magic = f.read(len(SQLITE_MAGIC))
    if magic != SQLITE_MAGIC:
        raise UserError(f"{head}: {path} file is not a database (SQLite); {valid}")
    import sqlite3

    try:
        tables = _tables(path)
    except sqlite3.Error as err:
        raise UserError(f"{head}: {path} cannot be read as SQLite ({one_line(err)}); {valid}")
    if tables and not OPTUNA_TABLES <= tables:
        shown = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
        raise UserError(
            f"{head}: {path} is the database of another program (tables {shown}), not of an "
            f"Optuna study; Optuna would add its tables to it: {valid}"
        )
