"""2D segmentation: DiceCE loss on slices or images, Dice per whole item. An evaluation batch
holds one item (the slices of a volume, or one image: litlab.domains.segmentation2d.data), and its Dice is that
item's, so `val/dice` (the monitor) is the mean over items of the mean over foreground classes,
as for 3D segmentation; `val/dice_K` is class K's."""

import torch
from torchmetrics import MetricCollection
from torchmetrics.segmentation import DiceScore

from litlab.bounds import NonNegFloat
from litlab.errors import UserError
from litlab.models.base import LitModule
from litlab.tasks import IMAGE_SEGMENTATION
from litlab.utils.tensors import class_map


class ItemDice(DiceScore):
    """Dice of each batch as one item (its slices stacked: a volume); `index`: one foreground
    class's (Lightning logs scalars only), else the mean over the foreground classes."""

    def __init__(self, num_classes: int, index: int | None = None):
        average = "macro" if index is None else "none"
        super().__init__(num_classes, include_background=False, average=average,
                         input_format="index")  # fmt: skip
        self.index = index

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        super().update(preds[None], target[None])

    def compute(self) -> torch.Tensor:
        value = super().compute()
        return value if self.index is None else value[self.index - 1]


class ImageSegmenter(LitModule):
    kinds = (IMAGE_SEGMENTATION,)
    metric_names = ("dice", "dice_*")
    batch_is_item = True  # the metrics' update takes one item a call (ItemDice)

    def __init__(
        self,
        net,
        optimizer,
        num_classes: int,
        scheduler=None,
        dice_weight: NonNegFloat = 1.0,
        ce_weight: NonNegFloat = 1.0,
        monitor: str = "val/dice",
        **kwargs,
    ):
        self.num_classes = num_classes
        super().__init__(net, optimizer, scheduler, monitor=monitor, **kwargs)
        from monai.losses import DiceCELoss

        self.loss = DiceCELoss(
            to_onehot_y=True, softmax=True, batch=True, lambda_dice=dice_weight,
            lambda_ce=ce_weight,
        )  # fmt: skip

    def on_fit_start(self) -> None:
        """One training step's memory, checked before the first one (`check_step_memory`)."""
        super().on_fit_start()
        dm = getattr(self.trainer, "datamodule", None)
        if dm is not None and getattr(dm, "image_size", None) is not None:
            check_step_memory(self.net, dm, self.device)

    def make_metrics(self) -> MetricCollection:
        metrics = {"dice": ItemDice(self.num_classes)}
        metrics |= {f"dice_{k}": ItemDice(self.num_classes, k) for k in range(1, self.num_classes)}
        return MetricCollection(metrics, compute_groups=False)

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """DiceCE of (N, classes, H, W) scores against (N, H, W) labels (also distillation's
        label term)."""
        return self.loss(logits, labels[:, None])

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = self.task_loss(logits, y)
        self.log_step("train", loss, class_map(logits), y, len(x))
        return loss

    def eval_step(self, split: str, batch) -> None:
        x, y = batch
        logits = self(x)
        self.log_step(split, self.task_loss(logits, y), class_map(logits), y, len(x))

    def predict_step(self, batch, batch_idx) -> dict[str, torch.Tensor]:
        """A row per slice (an image is one), in the order of the datamodule's `sources`
        (its volume and slice, or its image): `item_dice`, its item's Dice (the unit of the
        metric `dice`: averaged over items, not rows), the slice's own `dice` and `dice_K`
        (NaN where neither label nor prediction holds the class) and predicted `pixels_K`.
        With `output_dir` set (eval.py), the predicted label maps go to its masks/ folder as
        PNGs named by their source, at their source's size."""
        from torchmetrics.functional.segmentation import dice_score

        x, y = batch
        pred = class_map(self(x))

        def dice(p, t):
            return dice_score(p, t, self.num_classes, include_background=False,
                              average="none", input_format="index")  # fmt: skip

        per_slice, item = dice(pred, y), dice(pred[None], y[None])
        out = {"item_dice": item.nanmean(1).expand(len(pred)), "dice": per_slice.nanmean(1)}
        for k in range(1, self.num_classes):
            out[f"dice_{k}"] = per_slice[:, k - 1]
        for k in range(1, self.num_classes):
            out[f"pixels_{k}"] = (pred == k).flatten(1).sum(1)
        if self.output_dir is not None:
            self.write_masks(pred, batch_idx)
        return out

    def write_masks(self, pred: torch.Tensor, index: int) -> None:
        """Item `index` of the predicted split's label maps as 8-bit PNGs of class ids, the
        padding cropped off (the datamodule names them and knows each item's size)."""
        from PIL import Image

        from litlab.domains.segmentation2d.slices import crop_to

        dm = self.trainer.datamodule
        split = dm.predict_split
        names, shape = dm.mask_files(split)[index], dm.shapes[dm.split[split][index]]
        folder = self.output_dir / "masks"
        folder.mkdir(parents=True, exist_ok=True)
        for name, mask in zip(names, pred.to(torch.uint8).cpu().numpy()):
            Image.fromarray(crop_to(mask, shape)).save(folder / name)


#: a training step's memory per byte of the activations autograd keeps (measured on the
#: default U-Net on CPU: gradients, the loss's one-hot scores, the allocator's temporaries)
STEP_FACTOR = 2.5


def saved_bytes(net, shape: tuple) -> int | None:
    """Bytes of the activations a training forward of `net` on an input of `shape` keeps for
    the backward pass, counted on the meta device (nothing is allocated); None when the net
    cannot run there."""
    import copy

    total = [0]

    def pack(tensor):
        total[0] += tensor.numel() * tensor.element_size()
        return tensor

    try:
        meta = copy.deepcopy(net).to("meta").train()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = meta(torch.empty(shape, device="meta"))
    except Exception:  # noqa: BLE001  (an op without a meta kernel: not checked here)
        return None
    return total[0] + out.numel() * out.element_size()


def check_step_memory(net, dm, device: torch.device) -> None:
    """One line when a training batch of `data.batch_size` items padded to `data.image_size`
    needs more memory than the device has (a 4096 side trains a U-Net batch into the OOM
    killer: hundreds of GiB of activations), naming both settings and the largest item."""
    given, side = int(dm.hparams.batch_size), int(dm.image_size)
    train = getattr(dm, "train_set", None)
    batch = min(given, len(train)) if train is not None and len(train) else given
    kept = saved_bytes(net, (1, int(getattr(dm, "channels", 1)), side, side))
    if kept is None:
        return
    need = STEP_FACTOR * kept * batch
    if device.type == "cuda":
        have, where = torch.cuda.get_device_properties(device).total_memory, f"{device}"
    else:
        import psutil

        have, where = psutil.virtual_memory().total, "this machine"
    if need <= 0.9 * have:
        return
    largest = max((max(s) for s in getattr(dm, "shapes", []) or []), default=None)
    holds = f" (the largest item is {largest} pixels)" if largest else ""
    raise UserError(
        f"a training batch of {batch} items (data.batch_size={given}) padded to "
        f"data.image_size={side} needs about "
        f"{need / 2**30:.1f} GiB for one training step of model.net, more than {where}'s "
        f"{have / 2**30:.1f} GiB; lower data.image_size to the largest side of the items"
        f"{holds} or data.batch_size"
    )
