"""Images in, one class per image out (vision: digits, MNIST, CIFAR-10, image folders)."""

from litlab.tasks.kind import TENSOR_CLASSIFICATION, TaskKind

KIND = TaskKind(
    name="image_classification",
    metrics=("acc", "f1"),
    inputs="litlab.tasks.inputs:Images",
    inspect=("samples", "confusion", "gradcam", "embeddings", "histograms", "model_graph"),
    samples_figure="litlab.tasks.figures:ImageGrid",
    **TENSOR_CLASSIFICATION,
)
