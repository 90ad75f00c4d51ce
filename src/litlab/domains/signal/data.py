"""1D signals from an .npz file: `X` (N, C, T), float values of C channels over T steps, and
`y` (N,), an integer class per signal. Without a path, a demo of noisy sines generated here
(offline, seeded); `python -m litlab.domains.signal.data signals.npz` writes it as a file, the
shape your own data takes."""

import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from litlab.bounds import Fraction, NonNegInt, PosInt, Seed
from litlab.data import FoldSettings, NumFolds, SplitDataModule, settings_split
from litlab.errors import UserError
from litlab.tasks.signal_classification import SignalClassification


class SignalDataModule(FoldSettings, SplitDataModule):
    kind = SignalClassification.name
    data_name, fold_pool = "the signals", "signals"

    def __init__(
        self,
        path: str | None = None,
        batch_size: PosInt = 64,
        val_fraction: Fraction = 0.1,
        test_fraction: Fraction = 0.2,
        num_folds: NumFolds = None,
        fold: NonNegInt = 0,
        seed: Seed = 42,
        **kwargs,
    ):
        super().__init__(batch_size=batch_size, **kwargs)  # the other loader settings
        self.x, self.y = read_signals(path)
        self.split = self._split()
        # each channel standardized by the training signals' statistics (export and serving
        # store and apply the same)
        train = self.x[self.split["train"]]
        std = train.std((0, 2))
        self.mean, self.std = train.mean((0, 2)).tolist(), np.where(std > 1e-8, std, 1.0).tolist()

    @classmethod
    def check_settings(cls, settings: dict, key: str) -> None:
        path = settings.get("path")
        if path is not None and not Path(str(path)).is_file():
            raise UserError(
                f"{key}.path={path} is not a file (an .npz of X (N, C, T) and y (N,), or null: "
                "the demo signals)"
            )
        cls.check_folds(settings, key, None)

    @property
    def dims(self) -> dict:
        return {"in_channels": self.x.shape[1], "num_classes": int(self.y.max()) + 1}

    def _split(self) -> dict[str, np.ndarray]:
        """Signals by split, stratified by class (k-fold: fold `fold` tests)."""
        h = self.hparams
        if h.num_folds is not None:
            return settings_split(self.y, h, self.data_name, self.fold_pool)
        from litlab.data import stratified_split

        rest, test = stratified_split(self.y, h.test_fraction, h.seed, "data.test_fraction")
        fit, val = stratified_split(self.y[rest], h.val_fraction, h.seed, "data.val_fraction")
        return {"train": rest[fit], "val": rest[val], "test": test}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:  # once: a federated client's narrowed sets stay so
            return
        mean, std = (np.asarray(v, np.float32)[:, None] for v in (self.mean, self.std))
        x, y = torch.from_numpy((self.x - mean) / std), torch.from_numpy(self.y)
        self.train_set, self.val_set, self.test_set = (
            TensorDataset(x[self.split[s]], y[self.split[s]]) for s in ("train", "val", "test")
        )


def read_signals(path) -> tuple[np.ndarray, np.ndarray]:
    """(X float32 (N, C, T), y int64 (N,)); one line for a file that is not such signals."""
    if path is None:
        return demo_signals()
    try:
        with np.load(path, allow_pickle=False) as data:  # a file from elsewhere: no objects
            x, y = np.asarray(data["X"]), np.asarray(data["y"])
    except (OSError, ValueError, KeyError) as err:
        raise UserError(f"data.path={path}: not an .npz holding X and y ({err})") from None
    with np.errstate(over="ignore"):  # checked as the net computes: in float32
        x32 = x.astype(np.float32) if x.dtype.kind in "iuf" else np.full(1, np.nan)
    if x.ndim != 3 or y.shape != x.shape[:1] or len(y) < 10 or not np.isfinite(x32).all():
        raise UserError(
            f"data.path={path}: X {list(x.shape)} and y {list(y.shape)}; expected at least 10 "
            "signals, X (signals, channels, steps) of numbers finite in float32 and y (signals,)"
        )
    if y.dtype.kind not in "iu" or y.min() < 0 or len(np.unique(y)) < 2:
        raise UserError(f"data.path={path}: y must hold integer classes 0, 1, ... (2 or more)")
    return x32, y.astype(np.int64)


def demo_signals(count: int = 600, channels: int = 2, steps: int = 128, seed: int = 0):
    """Four classes of noisy sines: class k oscillates 2 + k times a window (random phase
    and amplitude) in channel 0, channel 1 is its square wave; Gaussian noise of std 2 on
    both (the classes overlap: no model is right on every signal)."""
    rng = np.random.default_rng(seed)
    y = np.arange(count) % 4
    t = np.linspace(0, 1, steps, endpoint=False)
    phase = rng.uniform(0, 2 * np.pi, (count, 1))
    wave = np.sin(2 * np.pi * (2 + y[:, None]) * t + phase) * rng.uniform(0.5, 1.5, (count, 1))
    x = np.stack([wave, np.sign(wave)][:channels], 1) + rng.normal(0, 2.0, (count, channels, steps))
    return x.astype(np.float32), y.astype(np.int64)


if __name__ == "__main__":  # python -m litlab.domains.signal.data OUT.npz
    x, y = demo_signals()
    np.savez(sys.argv[1], X=x, y=y)
    print(
        f"wrote {sys.argv[1]}: X {list(x.shape)}, y {list(y.shape)} ({len(np.unique(y))} classes)"
    )
