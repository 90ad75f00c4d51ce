"""Grad-CAM localizes: a model trained for a few epochs looks at the object that decides its
class, in 2D (a bright square on noise) and in 3D (the generated phantom's nodule). The maps are
computed under `torch.inference_mode()`, as inside `trainer.test`."""

import functools
from typing import ClassVar

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from litlab.callbacks.inspect import gradcam


class BrightSquares(L.LightningDataModule):
    """16x16 noise images; class 1 holds a bright 4x4 square somewhere, class 0 none."""

    kind = "image_classification"
    dims: ClassVar[dict] = {"in_channels": 1, "num_classes": 2, "image_size": 16}

    def __init__(self, n: int = 512, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        x = torch.rand(n, 1, 16, 16, generator=g) * 0.5
        y = torch.arange(n) % 2
        self.masks = torch.zeros(n, 16, 16, dtype=torch.bool)
        corners = torch.randint(0, 13, (n, 2), generator=g)
        for i in range(n):
            r, c = corners[i].tolist()
            self.masks[i, r : r + 4, c : c + 4] = bool(y[i])
        x[:, 0][self.masks] = 1.0
        self.x, self.y = x, y

    def train_dataloader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=32, shuffle=True)


def inside_outside(heat: torch.Tensor, masks: torch.Tensor) -> tuple[float, float]:
    return float(heat[masks].mean()), float(heat[~masks].mean())


def test_gradcam_2d_looks_at_the_bright_square():
    from litlab.domains.vision.module import ImageClassifier
    from litlab.domains.vision.nets import SmallCNN

    L.seed_everything(0)
    dm = BrightSquares()
    net = SmallCNN(1, 2, 16, channels=(8, 16), dropout=0.0)
    model = ImageClassifier(net, functools.partial(torch.optim.Adam, lr=3e-3), num_classes=2)
    L.Trainer(
        max_epochs=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(model, datamodule=dm)
    test = BrightSquares(n=64, seed=1)
    ones = test.y == 1
    model.eval()
    with torch.inference_mode():  # as in trainer.test: gradcam switches grad back on itself
        x = test.x[ones]
        assert (model(x).argmax(1) == 1).float().mean() > 0.9
        heat = gradcam(model, x, torch.ones(len(x), dtype=torch.long))
    assert heat.shape == (len(x), 16, 16)
    inside, outside = inside_outside(heat, test.masks[ones])
    print(f"grad-cam mean inside {inside:.3f}, outside {outside:.3f}")
    assert inside > 2 * outside, (inside, outside)


def small_3d_net() -> torch.nn.Module:
    """Two conv blocks and a max-pooled head: a detector, trained in seconds on a CPU."""
    from torch import nn

    return nn.Sequential(
        nn.Conv3d(1, 8, 3, padding=1),
        nn.BatchNorm3d(8),
        nn.ReLU(),
        nn.MaxPool3d(2),
        nn.Conv3d(8, 16, 3, padding=1),
        nn.BatchNorm3d(16),
        nn.ReLU(),
        nn.AdaptiveMaxPool3d(1),
        nn.Flatten(),
        nn.Linear(16, 2),
    )


@pytest.mark.slow
def test_gradcam_3d_looks_at_the_phantom_nodule(tmp_path):
    from monai.transforms import ResizeWithPadOrCrop

    from litlab.domains.medical3d import volumes as V
    from litlab.domains.medical3d.data import PhantomClassificationDataModule, split_indices
    from litlab.domains.medical3d.module import VolumeClassifier

    size = 24
    L.seed_everything(0)
    dm = PhantomClassificationDataModule(
        num_volumes=240, size=size, size_jitter=2, batch_size=16, augment=False, seed=0
    )
    model = VolumeClassifier(
        small_3d_net(), functools.partial(torch.optim.Adam, lr=3e-3), num_classes=2
    )
    L.Trainer(
        max_epochs=5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    ).fit(model, datamodule=dm)

    # the test volumes' nodules, regenerated exactly as the datamodule made the images
    h = dm.hparams
    test_idx = split_indices(240, h.val_fraction, h.test_fraction, h.seed)["test"]
    shapes = V.phantom_shapes(h.seed, 240, size, 2)
    fit = ResizeWithPadOrCrop([size] * 3)
    x_test, y_test = dm.test_set.tensors
    with_nodule = [i for i, y in enumerate(y_test.tolist()) if y == 1]
    masks = torch.stack(
        [
            torch.as_tensor(
                np.asarray(
                    fit(
                        V.phantom(h.seed, int(test_idx[i]), shapes[int(test_idx[i])], 0.5, h.noise)[
                            1
                        ]
                    )
                )
            )[0]
            == 2
            for i in with_nodule
        ]
    )
    x = x_test[with_nodule].float()
    model.eval()
    with torch.inference_mode():  # as in trainer.test
        acc = (model(x_test.float()).argmax(1) == y_test).float().mean()
        assert acc > 0.9, acc
        heat = gradcam(model, x, torch.ones(len(x), dtype=torch.long))
    assert heat.shape == masks.shape
    inside, outside = inside_outside(heat, masks)
    print(f"grad-cam mean inside {inside:.3f}, outside {outside:.3f}")
    assert inside > 2 * outside, (inside, outside)
