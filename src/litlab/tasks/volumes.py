"""The 3D kinds and their input mixins: volumes of the model's fixed size (`VolumeInputs`:
classification) and whole volumes of any size read by sliding windows of the model's patch
size (`WindowInputs`: segmentation). Both are served one volume a request, a NIfTI upload
(read by the service: `predictor.nifti`) or JSON. torch, MONAI and nibabel are imported where
used."""

from litlab.bounds import MAX_VOLUME_SIDE
from litlab.tasks import VOLUME_CLASSIFICATION, VOLUME_SEGMENTATION, checks
from litlab.tasks.figures import VolumeSlices
from litlab.tasks.kind import Classes, Kind, PixelClasses, Spec, register_kind
from litlab.tasks.tensors import MeasuredInputs
from litlab.tasks.units import VolumeUnits


def volume_shape(inputs: dict) -> list:
    shape = checks.listed(inputs["x"].get("shape"), "inputs.x.shape", 5)
    checks.integer(shape[1], "inputs.x.shape[1] (channels)", 1, checks.MAX_CHANNELS)
    return shape


class VolumeInputs(MeasuredInputs):
    """3D volumes of the model's fixed size: one NIfTI upload a request (padded or cropped to
    that size, as training's were), or JSON volumes."""

    def preprocessing(self, dm) -> dict:
        return {"normalization": "per-volume, per-channel z-score, fixed size"}

    def check_inputs(self, inputs: dict) -> int:
        shape = volume_shape(inputs)
        for s in shape[2:]:
            checks.integer(s, "a volume side in inputs.x.shape", 1, MAX_VOLUME_SIDE)
        checks.sample_size(shape[1:], "inputs.x.shape")
        return shape[1]

    async def uploads(self, predictor, raw: list[bytes], names: list[str]):
        checks.count(len(raw), 1, "files")
        return await predictor.offload(self.volume, predictor, raw[0], names[0])

    def volume(self, predictor, raw: bytes, name: str):
        """Pad or crop to the classifier's fixed size, as its training data was."""
        import numpy as np
        from monai.transforms import ResizeWithPadOrCrop

        runner, (volume, _) = predictor.runner, predictor.nifti(raw, name)
        size = [int(s) for s in runner.layout["x"]["shape"][2:]]
        x = np.asarray(ResizeWithPadOrCrop(size)(volume), dtype=np.float32)[None]
        return runner.answer(runner.run(x), x)

    def warm_up_shape(self, layout: dict) -> list[int]:
        return [int(s) for s in layout["x"]["shape"][2:]]

    async def warm_up(self, predictor) -> None:
        """Random NIfTI volumes of the model's size, through the upload path, twice."""
        import gzip

        import nibabel as nib
        import numpy as np

        shape = self.warm_up_shape(predictor.runner.layout)
        channels = [predictor.channels] if predictor.channels > 1 else []
        data = np.random.default_rng(0).normal(size=(*shape, *channels)).astype(np.float32)
        raw = gzip.compress(nib.Nifti1Image(data, np.eye(4)).to_bytes(), compresslevel=1)
        for _ in range(2):
            await self.uploads(predictor, [raw], ["warm-up.nii.gz"])


class WindowInputs(VolumeInputs):
    """Whole volumes of any size, read by sliding windows of the model's patch size: one volume
    a request, answered by a label volume (NIfTI for an upload, nested lists for JSON).
    Batches are dicts of `image` and `label`; training reads patches."""

    batchable = False
    units = VolumeUnits()

    def net_input(self, batch):
        return batch["image"]

    def check_inputs(self, inputs: dict) -> None:
        channels = volume_shape(inputs)[1]
        patch = checks.listed(inputs.get("patch_size"), "inputs.patch_size", 3)
        for s in patch:
            checks.integer(s, "a side of inputs.patch_size", 1, MAX_VOLUME_SIDE)
        checks.sample_size([channels, *patch], "a patch of channels x inputs.patch_size")
        window = inputs.get("sliding_window")
        checks.require(isinstance(window, dict), "inputs.sliding_window is missing")
        checks.check_number(window.get("overlap"), "inputs.sliding_window.overlap", 0, 0.95)
        checks.require(
            window.get("mode") in ("constant", "gaussian"),
            f"inputs.sliding_window.mode is {str(window.get('mode'))[:40]!r}; expected constant "
            "or gaussian",
        )
        # the out-of-distribution score reads the voxels' confidence alone

    def zeros(self, layout: dict, items: int) -> tuple:
        """`items` patches of the sliding window."""
        import numpy as np

        channels = int(layout["x"]["shape"][1])
        return (np.zeros((items, channels, *layout["patch_size"]), np.float32),)

    async def json(self, predictor, data: dict) -> dict:
        import numpy as np

        x = checks.array(data.get("inputs"), "inputs", np.float32, 5)
        checks.count(len(x), 1, "volumes")
        if x.shape[1] != predictor.channels or min(x.shape[2:]) < 1:
            raise checks.BadRequest(
                f"The volume must have shape [1, {predictor.channels}, D, H, W].", 422
            )
        mask, fields = await predictor.offload(predictor.runner.segment, x[0])
        return {"mask": mask.tolist(), "classes": predictor.runner.names, **fields}

    def volume(self, predictor, raw: bytes, name: str):
        """(the label volume as NIfTI bytes, the answer's other fields)."""
        volume, affine = predictor.nifti(raw, name)
        mask, fields = predictor.runner.segment(volume)
        return predictor.nifti_bytes(mask, affine), fields

    def warm_up_shape(self, layout: dict) -> list[int]:
        shape = [int(s) for s in layout.get("patch_size") or layout["x"]["shape"][2:]]
        shape[0] *= 2  # several windows: the sliding window's batch shape too
        return shape

    def patches(self, datamodule, count: int, start: int = 0):
        import torch

        datamodule.setup("fit")
        items = datamodule.train_set
        return torch.stack([items[i % len(items)]["image"] for i in range(start, start + count)])

    def ood_inputs(self, spec) -> list:
        return []  # patches are no whole volumes: the voxels' confidence alone

    def export_spec(self, run) -> Spec:
        """Patches in, logits out; whole volumes by sliding windows over the artifact (as the
        module does over the net). Spatial dims: any multiple of the stride."""
        import torch
        from monai.inferers import sliding_window_inference

        dm, model, patch = run.datamodule, run.model, tuple(run.model.patch_size)
        dm.setup("test")
        h = model.hparams
        net = run.config.model.net  # a pruned net: its factory's settings are its base_kwargs
        strides = net.get("strides") or net.get("base_kwargs", {}).get("strides", [2, 2, 2])
        stride = 2 ** len(strides)
        dims = {
            axis: stride * torch.export.Dim(f"{name}_over_{stride}", min=1)
            for axis, name in ((2, "depth"), (3, "height"), (4, "width"))
        }
        train = dm.train_set
        patches = [train[i]["image"] for i in range(min(8, len(train)))]  # random crops
        example = (torch.stack(patches[:2]),)
        bigger = torch.nn.functional.pad(example[0][:1], (0, stride, 0, 0, 0, 2 * stride))

        def logits(predict, inputs):
            return sliding_window_inference(
                inputs[0], patch, h.sw_batch_size, lambda x: predict(x),
                overlap=h.sw_overlap, mode=h.sw_mode,
            )  # fmt: skip

        def test_batches():
            for b in dm.loader(dm.test_set, train=False):
                yield (b["image"],), b["label"][:, 0]

        def calibration(k):
            for i in range(0, min(k * 2, len(train)), 2):
                yield (torch.stack([train[j]["image"] for j in (i, i + 1) if j < len(train)]),)

        layout = {
            "x": {
                "shape": ["batch", 1, "depth", "height", "width"],
                "dtype": "float32",
                "layout": "NCDHW",
                "spatial_multiple_of": stride,
                "normalization": "per-volume, per-channel z-score",
            },
            "patch_size": list(patch),
            "sliding_window": {"overlap": h.sw_overlap, "mode": h.sw_mode},
        }
        return Spec(
            self.name, ["x"], {"x": {0: "batch", **dims}}, example, [example, (bigger,)],
            layout, self.names(model, dm), test_batches, calibration,
            lambda predict, inputs: logits(predict, inputs).argmax(1),
            probs=lambda predict, inputs: logits(predict, inputs).softmax(1),
        )  # fmt: skip


@register_kind
class VolumeClassification(VolumeInputs, Classes, Kind):
    """3D volumes in, one class per volume out (MedMNIST 3D, phantom classification)."""

    name = VOLUME_CLASSIFICATION
    metrics = ("acc", "auroc")
    inspect = ("confusion", "gradcam", "embeddings", "histograms", "model_graph")


@register_kind
class VolumeSegmentation(WindowInputs, PixelClasses, Kind):
    """3D volumes in, a label per voxel out (Hippocampus, phantom segmentation): patches in
    training, sliding windows over whole volumes at test time, in export and in serving."""

    name = VOLUME_SEGMENTATION
    # Dice per structure and their mean; hd95 (voxels) on validation and test only
    metrics = ("dice", "dice_*", "hd95", "hd95_*")
    inspect = ("samples", "histograms", "model_graph")
    samples_figure = VolumeSlices
    # compression: every step. Judged by the test Dice over whole volumes (sliding windows);
    # the int8 file is kept only within 2% of the Dice it was quantized from
    compress_metric = "dice"
    quantize_max_drop = 0.02
    # per-voxel soft targets at T=1: at 4 the KL term (x T^2 = 16) drowned the Dice term that
    # teaches the small structures (phantoms: the student's nodule Dice stayed 0 in 5 epochs)
    distill_temperature = 1.0
