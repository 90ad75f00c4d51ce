"""Images in, one class per image out (vision: digits, MNIST, CIFAR-10, image folders)."""

from litlab.tasks.kind import TaskKind

KIND = TaskKind(
    name="image_classification",
    metrics=("acc", "f1"),
    export_spec="litlab.export.domains:tensor_spec",
    serve_files="image",
    ood_inputs=True,
    inspect=("samples", "confusion", "gradcam", "embeddings", "histograms", "model_graph"),
    samples_view="images",
)
