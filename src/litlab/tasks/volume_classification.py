"""3D volumes in, one class per volume out (MedMNIST 3D, phantom classification)."""

from litlab.tasks import VOLUME_CLASSIFICATION
from litlab.tasks.kind import Kind, register
from litlab.tasks.outputs import Classes
from litlab.tasks.volumes import VolumeInputs


@register
class VolumeClassification(VolumeInputs, Classes, Kind):
    name = VOLUME_CLASSIFICATION
    metrics = ("acc", "auroc")
    inspect = ("confusion", "gradcam", "embeddings", "histograms", "model_graph")
