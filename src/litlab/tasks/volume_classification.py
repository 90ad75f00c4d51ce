"""3D volumes in, one class per volume out (MedMNIST 3D, phantom classification)."""

from litlab.tasks.kind import TENSOR_CLASSIFICATION, TaskKind

KIND = TaskKind(
    name="volume_classification",
    metrics=("acc", "auroc"),
    inputs="litlab.tasks.inputs:Volumes",
    inspect=("confusion", "gradcam", "embeddings", "histograms", "model_graph"),
    **TENSOR_CLASSIFICATION,
)
