"""3D volumes in, one class per volume out (MedMNIST 3D, phantom classification)."""

from litlab.tasks.kind import TaskKind

KIND = TaskKind(
    name="volume_classification",
    metrics=("acc", "auroc"),
    export_spec="litlab.export.domains:tensor_spec",
    serve_files="volume",
    ood_inputs=True,
    inspect=("confusion", "gradcam", "embeddings", "histograms", "model_graph"),
)
