"""What a compression step bought: parameters (all and non-zero), size on disk (checkpoint
and ONNX), the test metric, and batch-1/batch-64 latency, eager torch and ONNX Runtime."""

from pathlib import Path

import torch

from litlab import tasks
from litlab.compression.prune import count_parameters


def tensor_batches(datamodule, split: str, limit: int | None = None):
    """Preprocessed (inputs, labels) batches of a split, as the model sees them at test time
    (scaled and normalized by the datamodule's batch hook; no augmentation)."""
    datamodule.setup("fit" if split == "train" else "test")
    loader = datamodule.loader(getattr(datamodule, f"{split}_set"), train=split == "train")
    for i, batch in enumerate(loader):
        if limit is not None and i >= limit:
            return
        yield datamodule.on_after_batch_transfer(batch, 0)


def has_tensor_inputs(datamodule) -> bool:
    """Kinds that quantize: fixed-size inputs that ONNX export, int8 calibration and batch-64
    latency can be fed ((inputs, labels) batches, or the kind's `patches` of whole 3D
    volumes; not graphs)."""
    return "quantize" in tasks.of(datamodule).compression


def onnx_metric(onnx_path: Path, model, datamodule, metric: str, run_cfg: dict) -> float:
    """The model's own test metric (`test/acc`, `test/dice`, ...) through ONNX Runtime,
    computed as `src/export.py` verifies a file (litlab.export.verify): segmentation by
    sliding windows of the file over whole test volumes."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from litlab.export.verify import predictor, test_metric

    config = OmegaConf.create(run_cfg)
    run = SimpleNamespace(model=model, datamodule=datamodule, config=config)
    spec = tasks.of(datamodule).export_spec(run)
    run = predictor("onnx", onnx_path, spec.input_names)
    return test_metric(model, spec, run, metric.split("/", 1)[1])


def calibration(datamodule, count: int):
    """Up to `count` input batches from the train split for int8 calibration: the kind's
    training patches where its inputs are whole items covered by windows, else batches."""
    kind = tasks.of(datamodule)
    first = kind.patches(datamodule, 2)
    if first is None:
        return [x for x, _ in tensor_batches(datamodule, "train", count)]
    size = min(count * 2, len(datamodule.train_set))
    return [first[: min(2, size)]] + [
        kind.patches(datamodule, min(2, size - i), i) for i in range(2, size, 2)
    ]


def example(datamodule, batch: int = 2) -> torch.Tensor:
    x = tasks.of(datamodule).patches(datamodule, batch)
    if x is None:
        x, _ = next(iter(tensor_batches(datamodule, "test")))
    return x[:batch].repeat(batch // len(x[:batch]) + 1, *[1] * (x.dim() - 1))[:batch]


def export_measured(model, datamodule, path: Path, run_cfg: dict | None = None) -> Path:
    """The model's net as one ONNX file (batch axis dynamic), via the exporter's code, with
    the run it scores on named in its metadata (`file_metadata`)."""
    from litlab.export.onnx import export_onnx

    meta = file_metadata(run_cfg, datamodule, ["x"]) if run_cfg is not None else None
    return Path(export_onnx(model, (example(datamodule),), path, metadata=meta))


def file_metadata(run_cfg: dict, datamodule, input_names: list[str]) -> dict:
    """What `eval.py model_path=` reads of a compress ONNX file (its int8 file keeps it): the
    run config that rebuilds the stage's model and data split, the task kind, the inputs."""
    return {"kind": tasks.of(datamodule).name, "input_names": input_names, "config": run_cfg}


def latency(net, onnx_files: dict, inputs, batch_sizes, budget_s: float) -> dict:
    """{"eager_b1": ms, "onnx_b64": ms, ...}: median latency per format and batch size
    (`inputs`: one sample, or batch size -> the inputs, as `measure_latency` takes them)."""
    from litlab.export.verify import measure_latency

    rows = measure_latency(net, onnx_files, inputs, tuple(batch_sizes), budget_s=budget_s)
    return {f"{r['format']}_b{r['batch']}": round(r["p50_ms"], 3) for r in rows}


def stage_row(stage, ckpt: Path | None, metric: float | None, metric_name: str, lat: dict) -> dict:
    """One row of the report: a `steps.Stage`, its checkpoint, its metric and latencies."""
    onnx = stage.onnx
    params, nonzero = count_parameters(stage.model.net)
    ckpt_mb, onnx_mb = (round(Path(p).stat().st_size / 1e6, 3) if p else None for p in (ckpt, onnx))
    return {
        "stage": stage.name,
        "params": params,
        "nonzero_params": nonzero,
        "checkpoint_mb": ckpt_mb,
        "onnx_mb": onnx_mb,
        metric_name: metric,
        "checkpoint": str(ckpt) if ckpt else None,
        "onnx": str(onnx) if onnx else None,
        **{f"latency_ms_{k}": v for k, v in lat.items()},
    }


def test_and_save(
    model, run_cfg: dict, datamodule, path: Path, metric: str, accelerator: str = "auto"
) -> float:
    """The model's test metric, and its checkpoint at `path` as train.py writes them (weights,
    hyperparameters, run config; no optimizer state): eval.py and export load it."""
    import lightning as L

    from litlab.checkpointing.run_config import RunConfigInCheckpoint

    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        logger=False,
        callbacks=[RunConfigInCheckpoint(run_cfg)],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    metrics = trainer.test(model, datamodule=datamodule, verbose=False)[0]
    # weights_only=False is the saving side's flag (keep the callbacks' state: the run config;
    # a test-only trainer has no optimizer state); every reader loads it with weights_only=True
    trainer.save_checkpoint(path, weights_only=False)
    model.cpu().eval()
    return float(metrics[metric])
