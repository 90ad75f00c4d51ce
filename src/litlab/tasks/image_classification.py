"""Images in, one class per image out (vision: digits, MNIST, CIFAR-10, image folders)."""

from litlab.tasks.kind import TENSOR_CLASSIFICATION, TaskKind

KIND = TaskKind(
    name="image_classification",
    metrics=("acc", "f1"),
    serve_files="image",
    inspect=("samples", "confusion", "gradcam", "embeddings", "histograms", "model_graph"),
    samples_view="images",
    **TENSOR_CLASSIFICATION,
)
