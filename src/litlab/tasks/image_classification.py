"""Images in, one class per image out (vision: digits, MNIST, CIFAR-10, image folders)."""

from litlab.tasks import IMAGE_CLASSIFICATION
from litlab.tasks.figures import ImageGrid
from litlab.tasks.kind import Kind, register
from litlab.tasks.outputs import Classes
from litlab.tasks.tensors import ImageInputs


@register
class ImageClassification(ImageInputs, Classes, Kind):
    name = IMAGE_CLASSIFICATION
    metrics = ("acc", "f1")
    inspect = ("samples", "confusion", "gradcam", "embeddings", "histograms", "model_graph")

    def samples_figure(self, count: int):
        return ImageGrid(count)
