"""Loggers from optional packages (requirements-optional.txt) that need a word of adapting."""


def neptune_logger(offline: bool = True, **kwargs):
    """The `neptune` package's own NeptuneLogger (Lightning 2.6 dropped its copy). `offline`
    stands for neptune's `mode` (offline | async), a key name litlab's checks keep for min|max."""
    from neptune.integrations.pytorch_lightning import NeptuneLogger

    return NeptuneLogger(mode="offline" if offline else "async", **kwargs)
