"""3D medical benchmark: is data loading negligible next to the model step, and how long is a
segmentation epoch?

    python bench/medical3d.py [--nifti /path/to/Hippocampus] [--steps 12]

For generated phantoms (model=unet3d, model=resnet3d defaults) and a NIfTI folder (the
unet3d_hippocampus experiment; default: a temp copy of ../shared/data/Hippocampus) it times,
in the main process (num_workers=0, the worst case), the median time to produce one training
batch and the median time of one training step (forward, backward, optimizer). Bar: data < 10%
of step. Then it fits the default phantom segmentation for 2 epochs and reports the second
epoch's wall time. Prints a markdown table; quote medians and ratios from one run.
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import train_config

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "phantom_seg + unet3d": ["model=unet3d"],
    "phantom_cls + resnet3d": ["model=resnet3d"],
    "nifti (Hippocampus) + unet3d": ["experiment=unet3d_hippocampus"],
}


def time_steps(cfg, steps: int) -> tuple[float, float]:
    """Median seconds per batch for loading and for one optimization step."""
    import torch

    from litlab.config import build

    dm = build.datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    model = build.model(cfg, dm)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.log = model.log_dict = lambda *a, **k: None  # no trainer: skip logging
    loader, loads, batches = iter(dm.train_dataloader()), [], []
    for _ in range(steps):
        t = time.perf_counter()
        try:
            batch = next(loader)
        except StopIteration:
            loader = iter(dm.train_dataloader())
            batch = next(loader)
        if hasattr(dm, "on_after_batch_transfer") and isinstance(batch, (list, tuple)):
            batch = dm.on_after_batch_transfer(batch, 0)
        loads.append(time.perf_counter() - t)
        batches.append(batch)
    model.train()
    times = []
    for i, batch in enumerate(batches):
        t = time.perf_counter()
        optimizer.zero_grad()
        model.training_step(batch, i).backward()
        optimizer.step()
        times.append(time.perf_counter() - t)
    return statistics.median(loads), statistics.median(times[1:])


def epoch_time(out: Path) -> float:
    """Second-epoch wall time of the default phantom segmentation fit."""
    import lightning as L

    from litlab.config import build

    class Clock(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer, module):
            self.last = time.perf_counter() - self.start

    cfg = train_config(
        [
            "model=unet3d",
            "trainer.max_epochs=2",
            "callbacks=none",
            "logger=csv",
            "extras.print_config=false",
            f"paths.log_dir={out}",
        ],
        out,
    )
    dm, clock = build.datamodule(cfg), Clock()
    model = build.model(cfg, dm)
    trainer = L.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[clock],
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=dm)
    return clock.last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nifti", default=str(ROOT.parent / "shared" / "data" / "Hippocampus"))
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    import torch

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="bench_medical3d_"))
    rows = []
    try:
        for name, overrides in CASES.items():
            extra = ["data.num_workers=0", "data.persistent_workers=false", f"paths.log_dir={tmp}"]
            if name.startswith("nifti"):
                if not Path(args.nifti).is_dir():
                    print(f"skipping {name}: {args.nifti} is absent", file=sys.stderr)
                    continue
                copy = tmp / "Hippocampus"
                shutil.copytree(args.nifti, copy)
                extra += [f"data.root={copy}", f"data.cache_dir={tmp / 'cache'}"]
            data_s, step_s = time_steps(train_config(overrides + extra, tmp / "run"), args.steps)
            rows.append((name, data_s, step_s))
        epoch_s = epoch_time(tmp / "fit")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{torch.get_num_threads()} torch threads; medians of {args.steps} batches\n")
    print("| data + model | data / batch (ms) | train step (ms) | data / step | bar < 10% |")
    print("| --- | --- | --- | --- | --- |")
    for name, data_s, step_s in rows:
        ratio = data_s / step_s
        print(
            f"| {name} | {1e3 * data_s:.1f} | {1e3 * step_s:.0f} | {100 * ratio:.1f}% | "
            f"{'pass' if ratio < 0.1 else 'FAIL'} |"
        )
    print(f"\nphantom segmentation (model=unet3d defaults): epoch time {epoch_s:.1f} s")


if __name__ == "__main__":
    main()
