"""Hydra's check for a debugger, without reading the source of every frame (issue #49). When a
command fails, Hydra prints its one line unless it is under a debugger, and to tell it calls
`inspect.stack()` (hydra._internal.utils.is_under_debugger, checked against hydra-core 1.3.8),
which finds the module and reads the source lines of every frame on the stack: in a test
worker, some 60 frames of pytest's, ~150 ms CPU per refused command (a command run from a
shell has a dozen). `is_under_debugger` answers the same question the same way (the third
outermost frame's file is pdb's or pydevd's, or a trace function is set) from the frames'
code objects; conftest.py's autouse fixture puts it in place while a test module runs."""

import sys

from hydra._internal import utils

CHECKED_WITH = {"hydra-core": "1.3.8"}
hydras = utils.is_under_debugger  # Hydra's own, for the check that both agree


def is_under_debugger() -> bool:
    frames = []  # this frame, then its callers out to the first: inspect.stack()'s order
    frame = sys._getframe(0)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    if len(frames) >= 3 and frames[-3].f_code.co_filename.endswith(("/pdb.py", "/pydevd.py")):
        return True
    return sys.gettrace() is not None


def install(patch) -> None:
    """Put the stand-in in place with `patch` (a pytest MonkeyPatch, undone by its owner)."""
    patch.setattr(utils, "is_under_debugger", is_under_debugger)
