"""GPU checks and throughput, in one short run: precision modes, NCCL DDP, torch.compile.

    python bench/gpu.py                  # on a CUDA machine: ~2-3 minutes, a Markdown table
    python bench/gpu.py --epochs 2       # shorter
    python bench/gpu.py --only bf16-true,ddp   # the settings whose names hold these words
On a machine without CUDA the GPU rows are printed as skipped and only the CPU fp32 row runs
(that is how the tests exercise this script). Each row builds the run exactly as
`python src/train.py model=M trainer=gpu trainer.precision=P ...` does (same configs, same
build functions), trains a few digits epochs in this process and reports:
  samples/s    training throughput after the first epoch (warm-up and compile excluded)
  val metric   the model's monitor after the last epoch (must be finite and above chance)
Then, per model, inference rows: eager fp32 on the GPU next to TensorRT fp16 (Torch-TensorRT,
`pip install -r requirements-gpu.txt`): samples/s of one eval batch, and the largest output
difference of TensorRT from eager (skipped, with the reason, where TensorRT cannot run).
"""

import argparse
import math
import sys
import time
from pathlib import Path

from common import train_config

ROOT = Path(__file__).resolve().parents[1]
DOMAINS = {"cnn": [], "gnn": [], "unet3d": [], "resnet3d": []}  # model -> extra overrides
# (row name, overrides, needs CUDA)
SETTINGS = [
    ("cpu fp32", ["trainer=cpu", "trainer.precision=32-true"], False),
    ("gpu fp32", ["trainer=gpu", "trainer.precision=32-true"], True),
    ("gpu 16-mixed (AMP + GradScaler)", ["trainer=gpu", "trainer.precision=16-mixed"], True),
    ("gpu bf16-mixed (trainer=gpu default)", ["trainer=gpu"], True),
    ("gpu bf16-true", ["trainer=gpu", "trainer.precision=bf16-true"], True),
    (
        "gpu ddp, NCCL, 1 GPU, bf16-mixed",
        [
            "trainer=ddp",
            "trainer.accelerator=gpu",
            "trainer.devices=1",
            "trainer.precision=bf16-mixed",
        ],
        True,
    ),
    ("gpu bf16-mixed + model.compile=true", ["trainer=gpu", "model.compile=true"], True),
    ("gpu fsdp, 1 GPU, bf16-mixed", ["trainer=fsdp", "trainer.devices=1"], True),
]
# --quick: what the tests run on a CPU (harness only)
QUICK = ["trainer.limit_train_batches=4", "trainer.limit_val_batches=2"]


def failed_row(model_name: str, name: str, err: Exception) -> tuple:
    """A table row for a case that raised: its error's first line (litlab's one-line form)."""
    from litlab.errors import one_line

    return (model_name, name, f"FAILED: {one_line(err, with_type=True, limit=120)}", "", "", "")


def batch_size(batch) -> int:
    """Samples in a batch: graphs in a PyG batch, else the first tensor's length."""
    if hasattr(batch, "num_graphs"):
        return int(batch.num_graphs)
    if isinstance(batch, dict):
        batch = list(batch.values())
    return len(batch[0]) if isinstance(batch, (list, tuple)) else len(batch)


def measure(model_name: str, overrides: list[str], epochs: int, out: Path) -> dict:
    """Train one setting in this process; its throughput, wall time, monitor and plugins."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback

    from litlab.config import build
    from litlab.runs import ddp

    class Throughput(Callback):
        """Samples/s of the training batches after the first epoch (synchronized clocks)."""

        def __init__(self):
            self.samples, self.seconds, self.start = 0, 0.0, None

        def _sync(self, trainer):
            if trainer.strategy.root_device.type == "cuda":
                torch.cuda.synchronize()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.current_epoch >= 1:
                self._sync(trainer)
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.start is not None:
                self._sync(trainer)
                self.seconds += time.perf_counter() - self.start
                self.samples += batch_size(batch)
                self.start = None

    cfg = train_config(
        [
            f"model={model_name}",
            *DOMAINS[model_name],
            *overrides,
            f"trainer.max_epochs={epochs}",
            "~logger",
            "callbacks=none",
            "extras.print_config=false",
            "+trainer.enable_progress_bar=false",
            "+trainer.enable_model_summary=false",
            "test=false",
        ],
        out,
    )
    with ddp.lifecycle(cfg, ROOT / "src" / "train.py") as ranks:
        L.seed_everything(cfg.seed, workers=True)
        datamodule = build.datamodule(cfg)
        model = build.model(cfg, datamodule)
        meter = Throughput()
        trainer = build.trainer(cfg, extra_callbacks=[meter, ranks.callback()])
        start = time.perf_counter()
        trainer.fit(model, datamodule=datamodule)
        wall = time.perf_counter() - start
        metric = float(trainer.callback_metrics.get(cfg.model.monitor, float("nan")))
        info = {
            "precision": str(trainer.precision),
            "strategy": type(trainer.strategy).__name__,
            "backend": getattr(trainer.strategy, "process_group_backend", None) or "-",
            "scaler": type(getattr(trainer.precision_plugin, "scaler", None)).__name__.replace(
                "NoneType", "none"
            ),
        }
    return {
        "samples_s": meter.samples / meter.seconds if meter.seconds else float("nan"),
        "wall": wall,
        "metric": metric,
        "monitor": cfg.model.monitor,
        **info,
    }


def inference_rows(model_name: str, out: Path, iters: int = 50) -> list[tuple]:
    """Eager fp32 and TensorRT fp16 inference of one eval batch on the GPU (untrained weights:
    speed and agreement only)."""
    import torch

    from litlab import tasks
    from litlab.config import build
    from litlab.config.rules import tensorrt_missing as missing
    from litlab.export.onnx import compile_fp16
    from litlab.export.recipe import prepare_net
    from litlab.runs.rebuild import LoadedRun

    cfg = train_config(
        [
            f"model={model_name}",
            *DOMAINS[model_name],
            "~logger",
            "callbacks=none",
            "extras.print_config=false",
        ],
        out,
    )
    datamodule = build.datamodule(cfg)
    model = build.model(cfg, datamodule).eval()
    kind = tasks.of(datamodule)
    spec = kind.export_spec(LoadedRun(model, datamodule, cfg, {}))
    net = prepare_net(model, kind).cuda()
    inputs = tuple(t.cuda() for t in spec.example)
    size = len(inputs[0])

    def rate(fn) -> float:
        with torch.inference_mode():
            for _ in range(5):
                fn(*inputs)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                fn(*inputs)
            torch.cuda.synchronize()
        return size * iters / (time.perf_counter() - start)

    rows = [(model_name, "inference eager fp32", "ok", f"{rate(net):,.0f}", "", "")]
    if (why := missing()) is not None:
        return rows + [(model_name, "inference TensorRT fp16", f"skipped: {why}", "", "", "")]
    trt = compile_fp16(net, inputs)
    with torch.inference_mode():
        diff = float((trt(*inputs).float() - net(*inputs).float()).abs().max())
    return rows + [
        (
            model_name,
            "inference TensorRT fp16",
            "ok",
            f"{rate(trt):,.0f}",
            "",
            f"max abs diff vs eager fp32 {diff:.2e}",
        )
    ]


def main() -> int:
    import importlib.util
    import os

    if importlib.util.find_spec("litlab") is None:  # the package lives in src/: re-run with it
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
            ),
        }
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2 epochs of 4 batches (tests)")
    parser.add_argument(
        "--only", default="", help="comma-separated words: the settings whose names hold one"
    )
    args = parser.parse_args()
    epochs, extra = (2, QUICK) if args.quick else (args.epochs, [])
    only = [word for word in args.only.split(",") if word]
    import tempfile

    import torch

    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if cuda else "no CUDA device"
    print(f"device: {device}; torch {torch.__version__}", flush=True)
    models = [m for m in DOMAINS if (ROOT / "configs" / "model" / f"{m}.yaml").is_file()]
    rows, failures = [], 0
    for model_name in models:
        for name, overrides, needs_cuda in SETTINGS:
            if only and not any(word in name for word in only):
                continue
            if needs_cuda and not cuda:
                rows.append((model_name, name, "skipped: no CUDA device", "", "", ""))
                continue
            if not needs_cuda and cuda and model_name != "cnn":
                continue  # the CPU row is the harness check; on a GPU only once
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    r = measure(model_name, overrides + extra, epochs, Path(tmp))
                ok = math.isfinite(r["metric"])
                failures += not ok
                rows.append(
                    (
                        model_name,
                        name,
                        "ok" if ok else "FAILED: non-finite metric",
                        f"{r['samples_s']:,.0f}",
                        f"{r['wall']:.1f}",
                        f"{r['monitor']}={r['metric']:.3f} ({r['precision']}, "
                        f"{r['strategy']}, backend {r['backend']}, scaler {r['scaler']})",
                    )
                )
            except Exception as err:  # one broken setting must not hide the others
                failures += 1
                rows.append(failed_row(model_name, name, err))
            print(f"  {rows[-1][0]} | {rows[-1][1]} | {rows[-1][2]}", flush=True)
        if only and not any(word in "inference" for word in only):
            continue
        if not cuda:
            rows.append(
                (model_name, "inference TensorRT fp16", "skipped: no CUDA device", "", "", "")
            )
            continue
        try:
            with tempfile.TemporaryDirectory() as tmp:
                rows += inference_rows(model_name, Path(tmp))
        except Exception as err:  # a TensorRT failure must not hide the training rows
            failures += 1
            rows.append(failed_row(model_name, "inference TensorRT fp16", err))
        print(f"  {rows[-1][0]} | {rows[-1][1]} | {rows[-1][2]}", flush=True)
    print(
        f"\n{device}, {epochs} epochs of data=digits (default batch_size), "
        f"throughput after epoch 1\n"
    )
    print(
        "| model | setting | check | samples/s (train; inference rows: eval batch) | "
        "fit wall (s) | details |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
