"""Bad input, told in one line: every litlab module raises `UserError`; the entry points print
it as `error: <message>` and exit with code 2 (see `litlab.cli`)."""


class UserError(Exception):
    """Bad input: a config value, a file, an incompatible pair. Shown as one line."""


def one_line(err: BaseException, *, with_type: bool = False, limit: int = 160) -> str:
    """An exception as one line, to end a UserError or fill a sweep's error column: its first
    line (its type when it has no text; `with_type` prefixes the type), cut at `limit`."""
    text = str(err).strip()
    line = " ".join(text.splitlines()[0].split()) if text else ""
    if with_type or not line:
        line = f"{type(err).__name__}: {line}" if line else type(err).__name__
    return line[:limit]
