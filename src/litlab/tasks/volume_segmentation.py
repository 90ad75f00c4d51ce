"""3D volumes in, a label per voxel out (Hippocampus, phantom segmentation): patches in
training, sliding windows over whole volumes at test time, in export and in serving."""

from litlab.tasks import VOLUME_SEGMENTATION
from litlab.tasks.figures import VolumeSlices
from litlab.tasks.kind import Kind, register
from litlab.tasks.outputs import PixelClasses
from litlab.tasks.volumes import WindowInputs


@register
class VolumeSegmentation(WindowInputs, PixelClasses, Kind):
    name = VOLUME_SEGMENTATION
    # Dice per structure and their mean; hd95 (voxels) on validation and test only
    metrics = ("dice", "dice_*", "hd95", "hd95_*")
    inspect = ("samples", "histograms", "model_graph")
    # compression: every step. Judged by the test Dice over whole volumes (sliding windows);
    # the int8 file is kept only within 2% of the Dice it was quantized from
    compress_metric = "dice"
    quantize_max_drop = 0.02
    # per-voxel soft targets at T=1: at 4 the KL term (x T^2 = 16) drowned the Dice term that
    # teaches the small structures (phantoms: the student's nodule Dice stayed 0 in 5 epochs)
    distill_temperature = 1.0

    def samples_figure(self, count: int):
        return VolumeSlices(count)
