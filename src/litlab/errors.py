"""Bad input, told in one line: every litlab module raises `UserError`; the entry points print
it as `error: <message>` and exit with code 2 (see `litlab.cli`)."""


class UserError(Exception):
    """Bad input: a config value, a file, an incompatible pair. Shown as one line."""


class DiskFull(UserError):
    """The disk filled while the run wrote: one line too, but the run failed (exit 1), its
    input was fine. What was written before (checkpoints) is kept for a resume."""

    exit_code = 1


def disk_full(err: BaseException) -> OSError | None:
    """The "no space left" error behind `err`, if any: torch.save reports a full disk as a
    RuntimeError whose context is the OSError, so the chain is followed."""
    import errno

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return err
        err = err.__cause__ or err.__context__
    return None


def one_line(err: BaseException, *, with_type: bool = False, limit: int = 160) -> str:
    """An exception as one line, to end a UserError or fill a sweep's error column: its first
    line (its type when it has no text; `with_type` prefixes the type), cut at `limit`."""
    text = str(err).strip()
    line = " ".join(text.splitlines()[0].split()) if text else ""
    if with_type or not line:
        line = f"{type(err).__name__}: {line}" if line else type(err).__name__
    return line[:limit]
