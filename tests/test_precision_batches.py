"""`trainer.precision=bf16-true` (weights cast to bf16) on a GPU: every batch must reach the
net in the weights' dtype. Lightning casts a batch's float tensors before the transfer hooks,
so images scaled from uint8 in a hook and PyG graphs (which its cast does not enter) reached
bf16 weights as float32 and failed in the first layer on an H200 (bench/gpu.py, BENCHMARKS.md
"GPU"). litlab refuses bf16-true on a CPU (too slow to be meant), so these checks drive
Lightning's own Trainer with it on the CPU: the same precision plugin, the same hooks."""

import lightning as L
import pytest
import torch

from litlab.config import build
from litlab.config.compose import compose


def float_tensors(batch) -> list[torch.Tensor]:
    """The float tensors of a (x, y) batch or of a PyG graph batch."""
    if isinstance(batch, (tuple, list)):
        items = list(batch)
    else:
        items = [v for v in batch.to_dict().values() if torch.is_tensor(v)]
    return [t for t in items if t.is_floating_point()]


class Record(L.Callback):
    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(batch)


# a batch's dtype is the point, not its size: the phantom volumes are few and small (bf16
# 3D convolutions are emulated on a CPU without AVX-512 BF16: 400 volumes took ~15 CPU s)
SMALL = {
    "resnet3d": ["data.num_volumes=12", "data.batch_size=2", "data.size=16", "data.size_jitter=0"]
}


@pytest.mark.parametrize("model", ["cnn", "gnn", "resnet3d"])
def test_bf16_true_batches_reach_the_net_in_bf16_and_the_data_stays_float32(model, tmp_path):
    overrides = [f"model={model}", "~logger", "callbacks=none", "extras.print_config=false"]
    cfg = compose("train", overrides + SMALL.get(model, []), output_dir=tmp_path)
    L.seed_everything(0)
    dm = build.datamodule(cfg)
    net = build.model(cfg, dm)
    record = Record()
    trainer = L.Trainer(
        accelerator="cpu",
        precision="bf16-true",
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
        default_root_dir=tmp_path,
    )
    trainer.fit(net, datamodule=dm)  # float32 inputs to bf16 weights raise in the first layer
    assert record.batches
    for batch in record.batches:
        assert {t.dtype for t in float_tensors(batch)} == {torch.bfloat16}
    assert torch.isfinite(torch.as_tensor(trainer.callback_metrics["train/loss"])).all()
    if model == "gnn":  # the cast was made on a copy: the dataset's graph is still float32
        assert dm.data.x.dtype == torch.float32
