"""A net that cannot run on the data, told in one line: the first forward pass of `model.net`
in a run (Lightning's sanity check, or the first training step) is watched; an error raised
inside it becomes a `UserError` naming `model.net`, its target and the input shape, instead of
a traceback from deep inside the loop. The watch ends after the first forward that works (no
cost per step after it)."""

import contextlib

from litlab.errors import UserError, one_line


def _shapes(args) -> str:
    shapes = []
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None:
            shapes.append(str(list(shape)))
    return " and ".join(shapes) or "?"


@contextlib.contextmanager
def watched(net, target: str, key: str = "model.net"):
    """Around `trainer.fit`/`trainer.test`: one line if the first forward of `net` fails."""
    state = {"inside": False, "shape": "?"}

    def before(module, args):
        state["inside"], state["shape"] = True, _shapes(args)

    def after(module, args, output):
        state["inside"] = False
        for handle in handles:  # it runs: stop watching
            handle.remove()

    handles = [net.register_forward_pre_hook(before), net.register_forward_hook(after)]
    try:
        yield
    except UserError:
        raise
    except Exception as err:
        if not state["inside"]:
            raise
        raise UserError(
            f"{key} ({target}) cannot run on the data: input of shape {state['shape']}: "
            f"{one_line(err)}; check the net's settings against the data (e.g. strides, "
            "kernel sizes, channels)"
        ) from err
    finally:
        for handle in handles:
            handle.remove()
