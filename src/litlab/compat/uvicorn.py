"""uvicorn internals litlab uses (checked against uvicorn 0.49.0).

- `Server._captured_signals`: the signals uvicorn re-raises after its shutdown; cleared so
  that a drained server exits 0 on SIGTERM (serving/server).
"""

CHECKED_WITH = "0.49.0"


def _fail(what: str):
    import uvicorn

    from litlab.compat import missing

    return missing("uvicorn", CHECKED_WITH, uvicorn.__version__, what)


def forget_captured_signals(server) -> None:
    server._captured_signals.clear()


def check_uvicorn() -> None:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app=None))
    if not hasattr(getattr(server, "_captured_signals", None), "clear"):
        raise _fail("uvicorn.Server._captured_signals")
