"""Where an Optuna study lives: a SQLite file in the sweep dir (one machine), or a database
server that workers on many machines share (PostgreSQL: docs/sweeps.md)."""

from pathlib import Path

from litlab.errors import UserError, one_line


def storage_for(url: str | None, sweep_dir: Path, heartbeat_interval: int | None):
    """RDB storage at `url`, or a SQLite file in the sweep dir; waits on a busy SQLite file."""
    import time

    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    url = url or f"sqlite:///{(sweep_dir / 'optuna.db').resolve()}"
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
