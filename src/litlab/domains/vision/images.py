"""Images in memory and on disk, and the batch augmentation of the vision datamodules
(vision.py)."""

import torch
from torch.utils.data import Dataset

from litlab.errors import UserError, one_line


def random_affine(
    x: torch.Tensor,
    degrees: float = 0.0,
    translate: float = 0.0,
    scale: tuple[float, float] = (1.0, 1.0),
    hflip: bool = False,
) -> torch.Tensor:
    """A different random rotation/shift/scale (and flip) for every image of a batch.

    `translate` is a fraction of the image size; empty borders are zero (black).
    """
    import torch.nn.functional as F

    n = x.shape[0]

    def uniform(lo, hi):
        return torch.empty(n, device=x.device).uniform_(lo, hi)

    angle = uniform(-degrees, degrees).deg2rad_()
    zoom = uniform(*scale)
    flip = torch.where(torch.rand(n, device=x.device) < 0.5, -1.0, 1.0) if hflip else 1.0
    theta = torch.zeros(n, 2, 3, device=x.device)
    theta[:, 0, 0] = angle.cos() / zoom * flip
    theta[:, 0, 1] = -angle.sin() / zoom
    theta[:, 1, 0] = angle.sin() / zoom * flip
    theta[:, 1, 1] = angle.cos() / zoom
    theta[:, :, 2] = torch.empty(n, 2, device=x.device).uniform_(-2 * translate, 2 * translate)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class TensorImages(Dataset):
    """Images held in memory as a uint8/float tensor (N, C, H, W) with integer labels.

    Items are returned as stored; scaling, augmentation and normalization happen per batch
    (VisionDataModule.on_after_batch_transfer)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def read_image(path: str, header_only: bool = False):
    """An image as RGB PIL (ImageFolder's loader), or one line naming the file it cannot read."""
    from PIL import Image

    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            if header_only:
                return None
            return img.convert("RGB")
    except Exception as err:  # noqa: BLE001 (PIL raises many kinds; all mean a bad file)
        raise UserError(
            f"cannot read image {path}: {one_line(err)}; fix or remove the file"
        ) from None
