"""One training epoch of the template's vision fit loop vs a hand-written PyTorch loop.

    .venv/bin/python bench/overhead.py [--epochs 6] [--repeat 3] [--batch-size 64]

Same net (the default SmallCNN), same data (digits, augmented and normalized per batch by the
datamodule), same batch size, same optimizer. The template side is the real thing: the default
config composed by Hydra and trained by `Trainer.fit` with its default callbacks and CSV logger
(validation off on both sides, so only the fit loop is compared). Per-epoch times, median over
all epochs but the first (warm-up) of every repetition; sides interleaved. Bar: <= 1.10x.
"""
import argparse
import tempfile
import time
from pathlib import Path

from common import median, table


class EpochTimer:
    """Lightning callback collecting per-epoch wall times of the training loop."""

    def __init__(self):
        import lightning as L

        class _Timer(L.Callback):
            def __init__(self):
                self.times = []

            def on_train_epoch_start(self, trainer, pl_module):
                self.start = time.perf_counter()

            def on_train_epoch_end(self, trainer, pl_module):
                self.times.append(time.perf_counter() - self.start)

        self.callback = _Timer()


def template_epochs(epochs: int, batch_size: int, out: Path) -> list[float]:
    from litlab.utils import build
    from litlab.utils.config import compose

    cfg = compose("train", [f"trainer.max_epochs={epochs}", "trainer.limit_val_batches=0",
                            "trainer.num_sanity_val_steps=0", f"data.batch_size={batch_size}",
                            "callbacks.early_stopping=null", "trainer.accelerator=cpu",
                            "callbacks.model_checkpoint.monitor=null"], output_dir=out)
    import lightning as L

    L.seed_everything(0)
    dm = build.datamodule(cfg)
    model = build.model(cfg, dm)
    timer = EpochTimer().callback
    trainer = build.trainer(cfg, extra_callbacks=[timer])
    trainer.fit(model, datamodule=dm)
    return timer.times[1:]


def manual_epochs(epochs: int, batch_size: int) -> list[float]:
    import torch
    import torch.nn.functional as F

    from litlab.data.vision import DigitsDataModule
    from litlab.models.nets.cnn import SmallCNN

    torch.manual_seed(0)
    dm = DigitsDataModule(batch_size=batch_size)
    dm.setup()
    net = SmallCNN(**dm.dims)
    opt = torch.optim.AdamW(net.parameters(), lr=0.005, weight_decay=0.0005)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    mean, std = torch.tensor(dm.mean).view(1, -1, 1, 1), torch.tensor(dm.std).view(1, -1, 1, 1)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        net.train()
        for x, y in dm.train_dataloader():
            x = (dm.augment(x) - mean) / std
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
        times.append(time.perf_counter() - start)
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    lit, manual = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            manual += manual_epochs(args.epochs, args.batch_size)
            lit += template_epochs(args.epochs, args.batch_size, Path(tmp) / str(r))
    ratio = median(lit) / median(manual)
    print(table(["loop", "median epoch (ms)", "epochs timed"],
                [["hand-written PyTorch", f"{1000 * median(manual):.1f}", len(manual)],
                 ["litlab Trainer.fit (default config)", f"{1000 * median(lit):.1f}", len(lit)]]))
    print(f"\nratio {ratio:.3f}x (bar 1.10x): {'PASS' if ratio <= 1.10 else 'FAIL'}")


if __name__ == "__main__":
    main()
