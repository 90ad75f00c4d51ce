"""Where the model looks: Grad-CAM (Captum's `LayerGradCam` on the net's last conv layer,
2D or 3D) for the first N test samples, drawn over the input (3D: the middle slices)."""

import torch
from torch import nn

from litlab.callbacks.inspect.base import TaskCallback, save_figure
from litlab.tasks.figures import mosaic

ALPHA = 0.45  # the heatmap's weight over the input


def last_conv(net: nn.Module) -> nn.Module:
    convs = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))]
    if not convs:
        raise ValueError(f"{type(net).__name__} has no Conv2d/Conv3d layer for Grad-CAM")
    return convs[-1]


def gradcam(
    model: nn.Module, x: torch.Tensor, target: torch.Tensor, layer: nn.Module | None = None
) -> torch.Tensor:
    """Heatmaps (N, *spatial) in [0, 1], upsampled to the input's size.

    Works inside `trainer.test`/`validate`, which run under `torch.inference_mode`: gradients
    are switched back on here, and the input is cloned (an inference tensor cannot require
    grad)."""
    from captum.attr import LayerAttribution, LayerGradCam

    net = getattr(model, "net", model)
    layer = layer or last_conv(net)
    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone().requires_grad_(True)
        attr = LayerGradCam(model, layer).attribute(
            x, target=target.clone(), relu_attributions=True
        )
        mode = "bilinear" if x.dim() == 4 else "trilinear"
        attr = LayerAttribution.interpolate(attr, tuple(x.shape[2:]), interpolate_mode=mode)
    heat = attr.detach()[:, 0]
    peak = heat.flatten(1).amax(1).clamp(min=1e-12).view(-1, *[1] * (heat.dim() - 1))
    return heat / peak


class GradCAM(TaskCallback):
    """`num_samples` first test samples; the map explains the predicted class (or the true one
    with `target: true`)."""

    inspects = "gradcam"

    def __init__(self, num_samples: int = 8, target: str = "pred", **kwargs):
        super().__init__(**kwargs)
        self.num_samples, self.target = num_samples, target
        self._x, self._y = [], []

    def on_test_epoch_start(self, trainer, pl_module):
        self._x, self._y = [], []

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        held = sum(len(x) for x in self._x)
        if held < self.num_samples:
            x, y = batch
            self._x.append(x[: self.num_samples - held])
            self._y.append(y[: self.num_samples - held])

    def on_test_epoch_end(self, trainer, pl_module):
        if not self._x or not trainer.is_global_zero:
            return
        x, y = torch.cat(self._x), torch.cat(self._y)
        self._x, self._y = [], []
        pred = pl_module(x).argmax(1)
        heat = gradcam(pl_module, x, pred if self.target == "pred" else y)
        save_figure(trainer, overlays(x, heat, y, pred), "gradcam", tight=False)  # a mosaic


def middle(t: torch.Tensor) -> torch.Tensor:
    """A 2D view of one sample (C, *spatial): its first channel, middle slice for volumes."""
    t = t[0]
    return t[t.shape[0] // 2] if t.dim() == 3 else t


def overlays(x: torch.Tensor, heat: torch.Tensor, y: torch.Tensor, pred: torch.Tensor):
    """Each input (scaled to [0, 1], grey) with its heatmap blended over it in the jet colormap."""
    from matplotlib import colormaps

    jet = colormaps["jet"]
    panels = []
    for i in range(len(x)):
        img = middle(x[i]).float().cpu()
        img = ((img - img.min()) / (img.max() - img.min() + 1e-12)).numpy()[..., None]
        hot = jet(middle(heat[i : i + 1]).cpu().clamp(0, 1).numpy())[..., :3]
        panels.append((1 - ALPHA) * img + ALPHA * hot)
    labels = [f"true {int(t)} pred {int(p)}" for t, p in zip(y, pred)]
    return mosaic(panels, labels, inches=1.6)
