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
    # compression: every step. Judged by the test Dice over whole volumes (sliding windows);
    # the int8 file is kept only within 2% of the Dice it was quantized from
    compress_metric="dice",
    compress_inputs="patches",
    quantize_max_drop=0.02,
    # one label volume per item: whole volumes are dealt out, by their dominant structure
    federated_units="volumes",
)
