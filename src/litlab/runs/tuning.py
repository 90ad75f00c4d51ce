"""Tuning before fit (`tune=lr`, `tune=batch_size`, or both: `tune=[lr,batch_size]`).

Lightning's finders, run on the trainer, model and datamodule of the run itself, which they
leave as they found them (weights and step restored) except for the value they set: the
suggested learning rate replaces the optimizer's `lr`, the found batch size the datamodule's
`batch_size`. Each prints its result, logs it (`tune/lr`, `tune/batch_size`) and writes its
files into <run dir>/tune/. Lightning's tuner needs a single device: refused under DDP.

The LR range test around Lightning's finder (at the end): its steps bounded by nothing but
their number, what ended it, and its loss curve read (where the loss still falls, the
suggestion in that range) and plotted."""

import contextlib
import dataclasses
import functools
import json
import logging
import math
import statistics
import time
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from litlab.bounds import Ge, Gt, PosFloat
from litlab.errors import UserError, one_line
from litlab.utils.distributed import is_rank_zero

log = logging.getLogger(__name__)


def run_tuners(tuners: list, trainer, model, datamodule) -> dict[tuple[str, ...], object]:
    """Run the configured finders in order (called once, right before `trainer.fit`); returns
    {the run config's key: the value set}, for `record`."""
    if not tuners:
        return {}
    strategy = type(trainer.strategy).__name__
    if trainer.world_size > 1 or strategy != "SingleDeviceStrategy":
        raise UserError(
            f"tune=... cannot run under {strategy} ({trainer.world_size} processes): "
            f"Lightning's finders need one device; tune with trainer=default, then "
            f"train with the value it prints"
        )
    found = {}
    with _explicit_weights_only(trainer):
        for tuner in tuners:
            value = tuner(trainer, model, datamodule)
            if value is not None:
                found[tuner.config_key] = value
    return found


def record(config: dict, found: dict[tuple[str, ...], object]) -> None:
    """Write the tuned values into the run config stored in checkpoints: eval, export and
    `load_run` rebuild the run as it was trained, not with the values the finders replaced."""
    for key, value in found.items():
        node = config
        for name in key[:-1]:
            node = node.setdefault(name, {})
        node[key[-1]] = value


@contextlib.contextmanager
def _explicit_weights_only(trainer):
    """Lightning's finders save the run's state to a temporary checkpoint and restore it when
    done, both with `weights_only` unset: saving then logs a notice and restoring relies on
    torch's default. Here both are explicit: the whole state is saved (the optimizer's too,
    tensors and plain values only) and it is read back with `weights_only=True`, as every
    checkpoint of litlab is."""
    from litlab.compat.lightning import checkpoint_connector

    connector, save = checkpoint_connector(trainer), trainer.save_checkpoint
    restore = connector.restore

    def save_whole(filepath, weights_only=None, storage_options=None):
        whole = False if weights_only is None else weights_only  # callers that set it: as is
        return save(filepath, weights_only=whole, storage_options=storage_options)

    def restore_weights_only(checkpoint_path=None, weights_only=None):
        return restore(checkpoint_path, weights_only=True)

    trainer.save_checkpoint, connector.restore = save_whole, restore_weights_only
    try:
        yield
    finally:
        del trainer.save_checkpoint, connector.restore  # the class's methods again


def _out_dir(trainer) -> Path:
    path = Path(trainer.default_root_dir) / "tune"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _report(trainer, name: str, value, text: str, extra: dict) -> None:
    for logger in trainer.loggers:
        logger.log_metrics({f"tune/{name}": float(value)}, step=0)
    if is_rank_zero():
        (_out_dir(trainer) / f"{name}.json").write_text(
            json.dumps({name: value, **extra}, indent=2)
        )
        print(text, flush=True)


def _lightning_args(finder, mode: str) -> dict:
    """A finder's fields as keyword arguments of Lightning's tuner method: the field named
    `mode` here (the config's `spacing` or `search`) is the one Lightning calls `mode`."""
    args = dataclasses.asdict(finder)
    args["mode"] = args.pop(mode)
    return args


def _keep_config_lr(model, why: str) -> None:
    lr = getattr(model.optimizer, "keywords", {}).get("lr")  # a partial from the config
    kept = f"{lr:.4g}" if isinstance(lr, int | float) else "the optimizer's default"
    log.warning(f"LR finder: {why}; keeping the config's lr {kept}")


MIN_STEPS = 20  # the fewest a curve is read from (`steepest_descent` skips 5, smooths over 5)


@dataclasses.dataclass
class LearningRateFinder:
    """Lightning's LR range test: `num_training` steps from `min_lr` to `max_lr`, whatever the
    run's `max_epochs` (`epochs_unbounded`), stopped early when the loss exceeds
    `early_stop_threshold` times its best; the suggestion is the steepest descent of the
    smoothed loss curve within the range where it still falls (`steepest_descent`; plot:
    tune/lr_find.png)."""

    min_lr: PosFloat = 1e-6
    max_lr: PosFloat = 1.0
    num_training: Annotated[int, Ge(MIN_STEPS)] = 100
    spacing: Literal["exponential", "linear"] = "exponential"
    early_stop_threshold: Annotated[float, Gt(1)] | None = 4.0
    config_key: ClassVar[tuple[str, ...]] = ("model", "optimizer", "lr")

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        if not settings["min_lr"] < settings["max_lr"]:
            raise UserError(
                f"{key}.min_lr={settings['min_lr']} is not below {key}.max_lr="
                f"{settings['max_lr']}: the search sweeps from min_lr up to max_lr"
            )

    def __call__(self, trainer, model, datamodule) -> float | None:
        from lightning.pytorch.tuner import Tuner

        with epochs_unbounded(trainer):
            finder = Tuner(trainer).lr_find(
                model, datamodule=datamodule, update_attr=False, **_lightning_args(self, "spacing")
            )
        if finder is None:  # Lightning skips it under fast_dev_run
            return _keep_config_lr(model, "skipped (trainer.fast_dev_run)")
        steps = len(finder.results["lr"])
        if steps < self.num_training and not diverged(
            finder.results["loss"], self.early_stop_threshold
        ):
            return _keep_config_lr(
                model,
                f"the training data gave {steps} of its {self.num_training} steps "
                f"({trainer.num_training_batches} batches per epoch: check the data and "
                "trainer.limit_train_batches)",
            )
        found = steepest_descent(finder.results["lr"], finder.results["loss"])
        if found is None:
            return _keep_config_lr(model, f"no falling range in the loss curve ({steps} steps)")
        return self._use(trainer, model, finder.results, found, passes(steps, trainer))

    def _use(self, trainer, model, results: dict, found: tuple, passes: str) -> float:
        """Train with the suggestion: the optimizer rebound, the curve plotted, the line printed."""
        best, top, bottom = found
        lr = float(results["lr"][best])
        if is_rank_zero():
            plot_lr_curve(results, best, top, bottom, _out_dir(trainer) / "lr_find.png")
        # the optimizer is a partial from config (LitModule builds it at fit): rebind its lr
        model.optimizer = functools.partial(model.optimizer, lr=lr)
        _report(
            trainer,
            "lr",
            lr,
            f"LR finder: suggested lr {lr:.4g}, the steepest descent of the smoothed loss "
            f"before its minimum at lr {results['lr'][bottom]:.3g} (searched "
            f"{self.min_lr:g} to {self.max_lr:g} in {len(results['lr'])} steps{passes}); "
            f"training with it",
            {
                "searched": [self.min_lr, self.max_lr],
                "falling_until": results["lr"][bottom],
                "results": results,
            },
        )
        return lr


@contextlib.contextmanager
def step_times(model):
    """{batch size: [seconds per training step]} while inside. Lightning's scaler runs its
    trials without the trainer's callbacks, so the module's own batch hooks are wrapped (on
    the instance; the class's methods come back on exit)."""
    from lightning.pytorch.utilities.parsing import lightning_getattr

    seconds: dict[int, list[float]] = {}
    started = [0.0]
    start_hook, end_hook = model.on_train_batch_start, model.on_train_batch_end

    def on_start(*args, **kwargs):
        started[0] = time.perf_counter()
        return start_hook(*args, **kwargs)

    def on_end(*args, **kwargs):
        size = int(lightning_getattr(model, "batch_size"))
        seconds.setdefault(size, []).append(time.perf_counter() - started[0])
        return end_hook(*args, **kwargs)

    model.on_train_batch_start, model.on_train_batch_end = on_start, on_end
    try:
        yield seconds
    finally:
        del model.on_train_batch_start, model.on_train_batch_end


def choose_batch_size(seconds: dict[int, list[float]], n_train: int, slack: float = 1.1):
    """(size, epoch seconds by size): the smallest size whose estimated epoch time (steps x
    median step time, the first step of each size left out as warm-up) is within `slack` of
    the fastest. Larger batches than that make epochs no faster, only fewer steps."""
    epoch = {
        size: -(-n_train // size) * statistics.median(times[1:] or times)
        for size, times in sorted(seconds.items())
        if size <= n_train
    }
    fastest = min(epoch.values())
    return min(s for s, t in epoch.items() if t <= slack * fastest), epoch


@dataclasses.dataclass
class BatchSizeFinder:
    """Lightning's batch-size scaler (`power` doubles from `init_val` until a trial runs out of
    memory or `max_trials`; `binsearch` then bisects), capped so that an epoch keeps
    `min_steps_per_epoch` steps of the training set, then the smallest size of those tried
    whose epoch is about as fast as the fastest (`choose_batch_size`): on a CPU, memory never
    stops the doubling, and beyond that size batches only take steps away."""

    search: str = "power"
    steps_per_trial: int = 3
    init_val: int = 2
    max_trials: int = 25
    min_steps_per_epoch: int = 10
    config_key: ClassVar[tuple[str, ...]] = ("data", "batch_size")

    def __call__(self, trainer, model, datamodule) -> int | None:
        from lightning.fabric.utilities.exceptions import MisconfigurationException
        from lightning.pytorch.tuner import Tuner
        from lightning.pytorch.utilities.parsing import lightning_setattr

        if "batch_size" not in getattr(datamodule, "hparams", {}):
            raise UserError(
                "tune=batch_size cannot run here: this data has no data.batch_size (a whole "
                "graph is one batch); tune=lr applies"
            )
        datamodule.setup("fit")
        n_train = len(datamodule.train_set)
        cap = max(self.init_val, n_train // self.min_steps_per_epoch)
        trials = min(self.max_trials, int(math.log2(cap / self.init_val)) + 1)
        args = _lightning_args(self, "search") | {"max_trials": trials}
        del args["min_steps_per_epoch"]  # litlab's own cap, not Lightning's
        try:
            with step_times(model) as seconds:
                largest = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, **args)
        except MisconfigurationException as err:  # e.g. full-graph data have no batch_size
            raise UserError(f"tune=batch_size cannot run here: {one_line(err)}") from None
        size, epoch = choose_batch_size({k: v for k, v in seconds.items() if k <= cap}, n_train)
        lightning_setattr(model, "batch_size", size)
        why = (
            f"the largest that keeps {self.min_steps_per_epoch} steps per epoch"
            if size == max(epoch)
            else f"larger sizes (up to {max(epoch)}) make an epoch at most "
            f"{epoch[size] / min(epoch.values()) - 1:.0%} faster"
        )
        _report(
            trainer,
            "batch_size",
            size,
            f"Batch-size finder: batch_size={size} ({why}; {n_train:,} training samples, "
            f"~{epoch[size]:.2f} s per epoch; memory allowed {largest}); training with it",
            {"search": self.search, "epoch_seconds": epoch, "largest_fitting": largest},
        )
        return size


# ----------------------------------------------------------------- the LR range test
def steepest_descent(
    lrs, losses, smooth: int = 5, skip_begin: int = 5
) -> tuple[int, int, int] | None:
    """(suggested, start, end) indices of an LR range test: the suggestion and the falling range.

    The loss is smoothed again (a centered moving average of `smooth` points on top of
    Lightning's running average), its descent measured against log10(lr) (the test's own
    spacing), and only the range where the smoothed loss falls is searched: from its highest
    point (after `skip_begin`: Lightning's running average starts biased) to its minimum. Lightning's `suggestion()` takes the steepest slope of the
    whole curve, which after the minimum can land on the blow-up's edge (the curve's peak)."""
    import numpy as np

    lrs, losses = np.asarray(lrs, float), np.asarray(losses, float)
    keep = np.isfinite(losses) & (lrs > 0)
    lrs, losses, index = lrs[keep], losses[keep], np.flatnonzero(keep)
    if len(losses) < skip_begin + 3:
        return None
    k = max(1, min(smooth, len(losses) // 10))
    padded = np.pad(losses, (k // 2, k - 1 - k // 2), mode="edge")
    smoothed = np.convolve(padded, np.ones(k) / k, mode="valid")
    bottom = skip_begin + int(np.argmin(smoothed[skip_begin:]))
    if bottom - skip_begin < 2:  # no falling range: the loss only rises
        return None
    top = skip_begin + int(np.argmax(smoothed[skip_begin:bottom]))
    if bottom - top < 2:
        return None
    slope = np.gradient(smoothed, np.log10(lrs))
    best = top + int(np.argmin(slope[top:bottom]))
    return int(index[best]), int(index[top]), int(index[bottom])


def plot_lr_curve(results: dict, best: int, top: int, bottom: int, path: Path) -> None:
    """The loss against the lr (log axis), the falling range shaded, the suggestion marked."""
    from matplotlib.figure import Figure

    lrs, losses = results["lr"], results["loss"]
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ax.plot(lrs, losses)
    ax.axvspan(lrs[top], lrs[bottom], color="tab:green", alpha=0.1, label="loss still falling")
    label = f"suggested lr {lrs[best]:.3g} (steepest descent)"
    ax.plot(lrs[best], losses[best], "o", color="tab:red", markersize=9, label=label)
    ax.set(xscale="log", xlabel="learning rate", ylabel="training loss (smoothed)")
    ax.legend()
    fig.savefig(path, dpi=90, bbox_inches="tight")


@contextlib.contextmanager
def epochs_unbounded(trainer):
    """Lightning's finder stops after `num_training` steps but leaves the run's `max_epochs` in
    place, so a short run ended its search early (digits, max_epochs=2: 42 of 100 steps, no
    falling range). While it searches, only its steps bound it: the training data is cycled
    (one epoch after another) until they are done; the run's limit is back afterwards."""
    loop = trainer.fit_loop
    before = loop.max_epochs
    loop.max_epochs = -1
    try:
        yield
    finally:
        loop.max_epochs = before


def diverged(losses, threshold: float | None) -> bool:
    """Whether Lightning's finder stopped on its early-stop rule: the smoothed loss above
    `threshold` times its best so far."""
    return threshold is not None and len(losses) > 1 and losses[-1] > threshold * min(losses[:-1])


def passes(steps: int, trainer) -> str:
    """', 4.8 passes over the 21 training batches' when the search outlasts an epoch."""
    batches, used = trainer.num_training_batches, steps * trainer.accumulate_grad_batches
    if not isinstance(batches, int) or batches <= 0 or used <= batches:
        return ""
    return f", {used / batches:.1f} passes over the {batches} training batch" + "es" * (batches > 1)
