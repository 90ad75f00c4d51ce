"""3D medical benchmark: is data loading negligible next to the model step, and how long is a
segmentation epoch?

    python bench/medical3d.py [--nifti /path/to/Hippocampus] [--steps 12] [--epochs 4]

For generated phantoms (model=unet3d, model=resnet3d defaults) and a NIfTI folder (the
unet3d_hippocampus experiment; default: a temp copy of ../shared/data/Hippocampus) it times,
in the main process (num_workers=0, the worst case), the median time to produce one training
batch and the median time of one training step (forward, backward, optimizer). Bar: data < 10%
of step. Then it fits the default phantom segmentation for 2 epochs and reports the second
epoch's wall time. Last, the Hippocampus recipes side by side, each as train.py runs it
(workers, callbacks, validation): per epoch the training time, its steps, the share of it spent
waiting for data, and the validation time (medians over epochs 2 to `--epochs`). Prints
markdown tables; quote medians and ratios from one run.
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
RECIPES = {
    "unet3d_hippocampus (old, 30 epochs)": "unet3d_hippocampus",
    "hippocampus": "hippocampus",
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
    dm, clock = build.datamodule(cfg), epoch_clock()
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
    return clock.epochs[-1][0]


def epoch_clock():
    """A callback that records per training epoch its seconds, steps and data wait (from one
    step's end, or the epoch's start, to the next step's start), and each validation's time."""
    import lightning as L

    class Clock(L.Callback):
        def __init__(self):
            self.epochs, self.val = [], []

        def on_train_epoch_start(self, trainer, module):
            self.start = self.mark = time.perf_counter()
            self.wait, self.steps = 0.0, 0

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.wait += time.perf_counter() - self.mark

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.mark, self.steps = time.perf_counter(), self.steps + 1

        def on_train_epoch_end(self, trainer, module):
            self.epochs.append((time.perf_counter() - self.start, self.steps, self.wait))

        def on_validation_epoch_start(self, trainer, module):
            self.val_start = time.perf_counter()

        def on_validation_epoch_end(self, trainer, module):
            if not trainer.sanity_checking:
                self.val.append(time.perf_counter() - self.val_start)

    return Clock()


def recipe_epochs(experiment: str, data: Path, epochs: int, out: Path, extra=()) -> dict:
    """Median epoch figures of `experiment` on the NIfTI copy `data`, as train.py fits it."""
    from common import fit_template

    overrides = [
        f"experiment={experiment}",
        f"data.root={data}",
        f"data.cache_dir={out / 'cache'}",
        f"trainer.max_epochs={epochs}",
        "logger=csv",
        "callbacks.rich_progress_bar=null",
        f"paths.log_dir={out}",
        *extra,
    ]
    clock = epoch_clock()
    fit_template(train_config(overrides, out / experiment), clock)
    later = clock.epochs[1:] or clock.epochs
    return {
        "epoch_s": statistics.median(e[0] for e in later),
        "steps": later[0][1],
        "step_s": statistics.median(e[0] / e[1] for e in later),
        "wait": statistics.median(e[2] / e[0] for e in later),
        "val_s": statistics.median(clock.val[1:] or clock.val),
    }


def cpu_options(cfg, steps: int) -> dict[str, float]:
    """Median seconds of one training step of `cfg`'s model on one batch of its data: as it
    is, channels-last 3D (weights and batch), bf16 autocast, and torch.compile (its first
    steps, which compile, left out)."""
    import torch

    from litlab.config import build

    dm = build.datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    out = {}
    for option in ("as it is", "channels_last_3d", "bf16 autocast", "torch.compile"):
        torch.manual_seed(0)
        model = build.model(cfg, dm)
        model.log = model.log_dict = lambda *a, **k: None  # no trainer: skip logging
        step_batch = dict(batch)
        if option == "channels_last_3d":
            model = model.to(memory_format=torch.channels_last_3d)
            step_batch["image"] = batch["image"].to(memory_format=torch.channels_last_3d)
        if option == "torch.compile":
            model._set_forward(torch.compile(model.net))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model.train()
        times = []
        for i in range(steps + 3):
            t = time.perf_counter()
            optimizer.zero_grad()
            with torch.autocast("cpu", torch.bfloat16, enabled=option == "bf16 autocast"):
                loss = model.training_step(step_batch, i)
            loss.backward()
            optimizer.step()
            times.append(time.perf_counter() - t)
        out[option] = statistics.median(times[3:])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nifti", default=str(ROOT.parent / "shared" / "data" / "Hippocampus"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of each recipe timed")
    parser.add_argument(
        "--cpu-options", action="store_true", help="also time channels-last, bf16 and compile"
    )
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
        recipes, options = {}, {}
        if Path(args.nifti).is_dir():
            for name, experiment in RECIPES.items():
                recipes[name] = recipe_epochs(experiment, tmp / "Hippocampus", args.epochs, tmp)
            if args.cpu_options:
                data = [f"data.root={tmp / 'Hippocampus'}", f"data.cache_dir={tmp / 'cache'}"]
                overrides = ["experiment=hippocampus", "data.num_workers=0", *data]
                options = cpu_options(train_config(overrides, tmp / "options"), args.steps)
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
    if recipes:
        print(f"\nHippocampus recipes, medians of epochs 2-{args.epochs}\n")
        print("| recipe | train epoch (s) | steps | step (ms) | data wait | validation (s) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, r in recipes.items():
            print(
                f"| {name} | {r['epoch_s']:.1f} | {r['steps']} | {1e3 * r['step_s']:.0f} | "
                f"{100 * r['wait']:.1f}% | {r['val_s']:.1f} |"
            )
    if options:
        base = options["as it is"]
        print("\nexperiment=hippocampus, one training step on the CPU, by option\n")
        print("| option | step (ms) | vs as it is |")
        print("| --- | --- | --- |")
        for name, step_s in options.items():
            print(f"| {name} | {1e3 * step_s:.0f} | {step_s / base:.2f}x |")


if __name__ == "__main__":
    main()
