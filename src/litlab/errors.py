"""Bad input, told in one line: every litlab module raises `UserError`; the entry points print
it as `error: <message>` and exit with code 2 (see `litlab.cli`)."""


class UserError(Exception):
    """Bad input: a config value, a file, an incompatible pair. Shown as one line.

    Raised in a DataLoader worker (`data.num_workers>0`), it reaches the main process rebuilt
    by torch from a message of the worker's whole traceback (`ExceptionWrapper.reraise`): the
    original line is taken back out of it, so the error is one line with workers too."""

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str):
            args = (_worker_line(args[0], type(self)),)
        super().__init__(*args)


def _worker_line(message: str, cls: type) -> str:
    """The error's own line from torch's "Caught X in DataLoader worker process N.\nOriginal
    Traceback ..." message; any other message as it is."""
    if not message.startswith("Caught ") or "\nOriginal Traceback" not in message:
        return message
    prefixes = tuple(
        f"{c.__module__}.{c.__qualname__}: " for c in cls.__mro__ if issubclass(c, UserError)
    )
    for line in reversed(message.splitlines()):
        if line.startswith(prefixes):
            return line.split(": ", 1)[1]
    return message


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


def refusal_behind(caught: BaseException) -> UserError | None:
    """The UserError behind OmegaConf's errors (each resolution level wraps the one below as
    its context), followed through OmegaConf's exceptions only: a crash of other code while a
    UserError was handled stays a crash."""
    from omegaconf.errors import OmegaConfBaseException

    err = caught
    while isinstance(err, OmegaConfBaseException):
        err = err.__cause__ or err.__context__
    return err if isinstance(err, UserError) and err is not caught else None


def closest(word: str, options) -> str:
    """ "; did you mean X?" for the valid option closest to a mistyped `word`, or nothing."""
    import difflib

    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return f"; did you mean {match[0]}?" if match else ""


def fmt(value) -> str:
    """A config value as the user would type it on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) and (not value or " " in value) else str(value)


def one_line(err: BaseException, *, with_type: bool = False, limit: int = 160) -> str:
    """An exception as one line, to end a UserError or fill a sweep's error column: its first
    line (its type when it has no text; `with_type` prefixes the type), cut at `limit`."""
    text = str(err).strip()
    line = " ".join(text.splitlines()[0].split()) if text else ""
    if with_type or not line:
        line = f"{type(err).__name__}: {line}" if line else type(err).__name__
    return line[:limit]
