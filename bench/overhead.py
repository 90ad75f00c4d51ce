"""One training epoch of the template's vision fit loop vs a hand-written PyTorch loop.

    PYTHONPATH=src .venv/bin/python bench/overhead.py [--epochs 11] [--repeat 3] [--batch-size 64]

Same net (the default SmallCNN), same data (digits, augmented and normalized per batch by the
datamodule), same batch size, same optimizer and scheduler. The template side is the real thing:
the default config composed by Hydra and trained by `Trainer.fit` with its default callbacks and
CSV logger (validation off on both sides, so only the fit loop is compared).

The two sides are paired: at the start of every template epoch a callback runs one epoch of the
hand-written loop (its own net, optimizer and loader), then times the template's epoch. This
shared VM's speed drifts by +-30% over seconds, so alternating epoch by epoch is what keeps the
comparison fair; the bar applies to the median of the per-pair ratios (first pair of every
repetition skipped as warm-up). Bar: <= 1.10x. A second row pairs the hand-written loop with
plain Lightning (a minimal LightningModule, everything off): Lightning's own floor, so the
template's share of the overhead is the difference between the two rows.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import fit_template, median, plain_trainer, table, train_config


class ManualLoop:
    """The hand-written loop a researcher would write for the same job."""

    def __init__(self, batch_size: int, epochs: int):
        import torch

        from litlab.domains.vision.data import DigitsDataModule
        from litlab.domains.vision.nets import SmallCNN

        self.dm = DigitsDataModule(batch_size=batch_size)
        self.dm.setup()
        self.net = SmallCNN(**self.dm.dims)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=0.005, weight_decay=0.0005)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=epochs)
        self.mean = torch.tensor(self.dm.mean).view(1, -1, 1, 1)
        self.std = torch.tensor(self.dm.std).view(1, -1, 1, 1)

    def epoch(self) -> float:
        import torch.nn.functional as F

        start = time.perf_counter()
        self.net.train()
        for x, y in self.dm.train_dataloader():
            x = (self.dm.augment(x) - self.mean) / self.std
            loss = F.cross_entropy(self.net(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        self.sched.step()
        return time.perf_counter() - start


def paired_callback(manual: ManualLoop):
    import lightning as L

    class PairedEpochs(L.Callback):
        """Runs one hand-written epoch, then times the template's next epoch."""

        def __init__(self):
            self.pairs: list[tuple[float, float]] = []

        def on_train_epoch_start(self, trainer, pl_module):
            self.manual = manual.epoch()
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module):
            self.pairs.append((self.manual, time.perf_counter() - self.start))

    return PairedEpochs()


def paired_epochs(epochs: int, batch_size: int, out: Path) -> list[tuple[float, float]]:
    cfg = train_config(
        [
            f"trainer.max_epochs={epochs}",
            "trainer.limit_val_batches=0",
            "trainer.num_sanity_val_steps=0",
            f"data.batch_size={batch_size}",
            "callbacks.early_stopping=null",
            "trainer.accelerator=cpu",
            "callbacks.model_checkpoint.monitor=null",
        ],
        out,
    )
    pairs = paired_callback(ManualLoop(batch_size, epochs))
    fit_template(cfg, pairs)
    return pairs.pairs[1:]


def plain_lightning_pairs(epochs: int, batch_size: int) -> list[tuple[float, float]]:
    """The floor: Lightning's Trainer with a minimal LightningModule and nothing switched on
    (no callbacks, logger, checkpoints, metrics), paired with the hand-written loop likewise."""
    import lightning as L
    import torch
    import torch.nn.functional as F

    from litlab.domains.vision.data import DigitsDataModule
    from litlab.domains.vision.nets import SmallCNN

    class Minimal(L.LightningModule):
        def __init__(self, dims):
            super().__init__()
            self.net = SmallCNN(**dims)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=0.005, weight_decay=0.0005)
            return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)]

    dm = DigitsDataModule(batch_size=batch_size)
    pairs = paired_callback(ManualLoop(batch_size, epochs))
    plain_trainer(epochs, pairs, limit_val_batches=0).fit(Minimal(dm.dims), datamodule=dm)
    return pairs.pairs[1:]


def summary(name: str, pairs: list[tuple[float, float]]) -> tuple[list, float]:
    ratios = [t / m for m, t in pairs]
    q1, ratio, q3 = statistics.quantiles(ratios, n=4)
    return [
        name,
        f"{1000 * median([m for m, _ in pairs]):.1f}",
        f"{1000 * median([t for _, t in pairs]):.1f}",
        f"{ratio:.3f}x ({q1:.2f}-{q3:.2f})",
        len(pairs),
    ], ratio


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=11)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    template, plain = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            template += paired_epochs(args.epochs, args.batch_size, Path(tmp) / str(r))
            plain += plain_lightning_pairs(args.epochs, args.batch_size)
    row, ratio = summary("litlab Trainer.fit (default config)", template)
    floor_row, _ = summary("plain Lightning (minimal module, all off)", plain)
    print(
        table(
            [
                "loop",
                "hand-written epoch (ms)",
                "its epoch (ms)",
                "median per-pair ratio (quartiles)",
                "pairs",
            ],
            [row, floor_row],
        )
    )
    print(
        f"\ntemplate: median per-pair ratio {ratio:.3f}x (bar 1.10x): "
        f"{'PASS' if ratio <= 1.10 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
