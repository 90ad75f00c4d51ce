"""3D volumes in, a label per voxel out (Hippocampus, phantom segmentation): patches in
training, sliding windows over whole volumes at test time and in serving."""

from litlab.tasks.kind import TaskKind

KIND = TaskKind(
    name="volume_segmentation",
    metrics=("dice", "dice_*"),
    # patches in; whole volumes by sliding windows over the exported file
    export_spec="litlab.export.domains:segmentation_spec",
    serve_output="mask",
    serve_files="volume",
    inspect=("samples", "histograms", "model_graph"),
    samples_view="volume_slices",
    compression=("prune_unstructured",),
    # one label volume per item: whole volumes are dealt out, by their dominant structure
    federated_units="volumes",
    notes={
        "quantize": "its report is a test accuracy of class scores",
        "prune with compress.prune.method=structured": "Torch-Pruning sizes plain tensor nets",
        "distill": "distillation matches class scores, not label volumes",
    },
)
