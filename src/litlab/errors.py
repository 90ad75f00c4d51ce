"""Bad input, told in one line: every litlab module raises `UserError`; the entry points print
it as `error: <message>` and exit with code 2 (see `litlab.cli`)."""


class UserError(Exception):
    """Bad input: a config value, a file, an incompatible pair. Shown as one line."""


def first_line(err: BaseException) -> str:
    """An exception's first line, short enough to end a one-line UserError."""
    text = str(err).strip()
    return text.splitlines()[0][:160] if text else type(err).__name__
