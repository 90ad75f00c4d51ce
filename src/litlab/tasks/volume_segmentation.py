"""3D volumes in, a label per voxel out (Hippocampus, phantom segmentation): patches in
training, sliding windows over whole volumes at test time and in serving."""

from litlab.tasks.kind import TaskKind

KIND = TaskKind(
    name="volume_segmentation",
    # Dice per structure and their mean; hd95 (voxels) on validation and test only
    metrics=("dice", "dice_*", "hd95", "hd95_*"),
    # patches in; whole volumes by sliding windows over the exported file
    export_spec="litlab.export.domains:segmentation_spec",
    # one volume a request (NIfTI upload or JSON), read by sliding windows of the patch size
    inputs="litlab.tasks.inputs:VolumeWindows",
    # class scores per voxel (the service's sliding windows read them)
    outputs="litlab.tasks.outputs:PixelClasses",
    inspect=("samples", "histograms", "model_graph"),
    samples_figure="litlab.tasks.figures:VolumeSlices",
    # compression: every step. Judged by the test Dice over whole volumes (sliding windows);
    # the int8 file is kept only within 2% of the Dice it was quantized from
    compress_metric="dice",
    quantize_max_drop=0.02,
    # per-voxel soft targets at T=1: at 4 the KL term (x T^2 = 16) drowned the Dice term that
    # teaches the small structures (phantoms: the student's nodule Dice stayed 0 in 5 epochs)
    distill_temperature=1.0,
    # one label volume per item: whole volumes are dealt out, by their dominant structure
    federated_units="volumes",
)
