"""A net that cannot run on the data, or data that cannot be set up, told in one line: the first
forward pass of `model.net` in a run (Lightning's sanity check, or the first training step) is
watched; an error raised inside it becomes a `UserError` naming `model.net`, its target and the
input shape, instead of a traceback from deep inside the loop. The watch ends after the first
forward that works (no cost per step after it). An error raised in the datamodule's
`prepare_data`/`setup` (called by Lightning inside fit) names `data` and its target."""

import contextlib
import traceback

from litlab.errors import UserError, one_line


def _shapes(args) -> str:
    shapes = [str(list(a.shape)) for a in args if getattr(a, "shape", None) is not None]
    return " and ".join(shapes) or "?"


def _in_data_setup(err: BaseException, datamodule) -> bool:
    """The error was raised inside `datamodule.prepare_data` or `setup`."""
    return any(
        frame.f_code.co_name in ("prepare_data", "setup")
        and frame.f_locals.get("self") is datamodule
        for frame, _ in traceback.walk_tb(err.__traceback__)
    )


class _Watch:
    """The hooks on `net`: a module-level class, so a net that a spawning strategy pickles
    (`trainer=ddp_spawn`) pickles with them (its ranks' errors are not rewritten: they run in
    other processes)."""

    def __init__(self, net):
        self.inside, self.shape = False, "?"
        self.handles = [
            net.register_forward_pre_hook(self.before),
            net.register_forward_hook(self.after),
        ]

    def before(self, module, args):
        self.inside, self.shape = True, _shapes(args)

    def after(self, module, args, output):
        self.inside = False
        self.remove()  # it runs: stop watching

    def remove(self):
        for handle in self.handles:
            handle.remove()


@contextlib.contextmanager
def watched(net, target: str, key: str = "model.net", datamodule=None, data_target: str = ""):
    """Around `trainer.fit`/`trainer.test`: one line if the first forward of `net` fails, or
    (given `datamodule`) if its setup does."""
    watch = _Watch(net)
    try:
        yield
    except UserError:
        raise
    except Exception as err:
        if datamodule is not None and not watch.inside and _in_data_setup(err, datamodule):
            raise UserError(f"data ({data_target}) cannot be set up: {one_line(err)}") from err
        if not watch.inside:
            raise
        raise UserError(
            f"{key} ({target}) cannot run on the data: input of shape {watch.shape}: "
            f"{one_line(err)}; check the net's settings against the data (e.g. strides, "
            "kernel sizes, channels)"
        ) from err
    finally:
        watch.remove()
