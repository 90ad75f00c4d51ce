"""Where litlab's own classes moved. A checkpoint written before each domain became one folder
(`litlab.domains`), or before small modules joined the module of their concept,
names its classes by their old module paths (`litlab.data.vision.DigitsDataModule`,
`litlab.models.nets.cnn.SmallCNN`, `litlab.compression.resize.resized_net`); its stored config's
`_target_` and `base_target` names are renamed by this fixed table when the checkpoint is read,
before anything checks or builds them (litlab.checkpointing.trust still checks the new name).
Only whole module paths litlab shipped are renamed: a file can name nothing new through it."""

#: old module -> the module it became
MOVED = {
    "litlab.data.vision_downloads": "litlab.domains.vision.downloads",
    "litlab.data.vision": "litlab.domains.vision.data",
    "litlab.data.images": "litlab.domains.vision.data",
    "litlab.models.vision": "litlab.domains.vision.module",
    "litlab.models.nets.cnn": "litlab.domains.vision.nets",
    "litlab.models.nets.resnet": "litlab.domains.vision.nets",
    "litlab.data.medical3d": "litlab.domains.medical3d.data",
    "litlab.data.medmnist3d": "litlab.domains.medical3d.data",
    "litlab.data.volumes": "litlab.domains.medical3d.volumes",
    "litlab.models.medical3d": "litlab.domains.medical3d.module",
    "litlab.models.nets.resnet3d": "litlab.domains.medical3d.nets",
    "litlab.models.nets.unet3d": "litlab.domains.medical3d.nets",
    "litlab.data.graph": "litlab.domains.graph.data",
    "litlab.data.tudataset": "litlab.domains.graph.data",
    "litlab.models.graph": "litlab.domains.graph.module",
    "litlab.models.nets.gnn": "litlab.domains.graph.nets",
    "litlab.data.table": "litlab.domains.table.data",
    "litlab.models.regression": "litlab.domains.table.module",
    "litlab.models.nets.table": "litlab.domains.table.nets",
    "litlab.data.slices": "litlab.domains.segmentation2d.data",
    "litlab.models.segmentation2d": "litlab.domains.segmentation2d.module",
    "litlab.models.nets.unet2d": "litlab.domains.segmentation2d.nets",
    "litlab.loggers.optional": "litlab.loggers",
    "litlab.loggers.resumable_csv": "litlab.loggers",
    "litlab.loggers.run_ids": "litlab.loggers",
    "litlab.callbacks.progress": "litlab.callbacks.summary",
    "litlab.callbacks.lr_monitor": "litlab.callbacks.summary",
    "litlab.compression.resize": "litlab.compression.prune",
    "litlab.loggers.mlflow": "litlab.loggers",
    "litlab.callbacks.inspect.samples": "litlab.callbacks.inspect",
    "litlab.checkpointing.last": "litlab.checkpointing.resume_state",
    "litlab.recipes.tuning": "litlab.runs.tuning",
    "litlab.compat.lightning_csv": "litlab.compat.lightning",
    "litlab.checkpointing.callback_states": "litlab.checkpointing.trust",
    "litlab.utils.plots": "litlab.tasks.figures",
    "litlab.models.base": "litlab.models",
    "litlab.recipes.train": "litlab.recipes",
    "litlab.recipes.report": "litlab.recipes",
    "litlab.callbacks.inspect.base": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.confusion": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.embeddings": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.gradcam": "litlab.callbacks.inspect",
    "litlab.callbacks.inspect.histograms": "litlab.callbacks.inspect",
    "litlab.tasks.outputs": "litlab.tasks.kind",
    "litlab.config.hydra_errors": "litlab.config.compose",
    "litlab.config.strategies": "litlab.config.build",
    "litlab.domains.vision.nets.cnn": "litlab.domains.vision.nets",
    "litlab.domains.vision.nets.resnet": "litlab.domains.vision.nets",
    "litlab.domains.medical3d.nets.resnet3d": "litlab.domains.medical3d.nets",
    "litlab.domains.medical3d.nets.unet3d": "litlab.domains.medical3d.nets",
    "litlab.domains.graph.nets.gnn": "litlab.domains.graph.nets",
    "litlab.domains.graph.nets.prune": "litlab.domains.graph.prune",
    "litlab.domains.table.nets.mlp": "litlab.domains.table.nets",
    "litlab.domains.segmentation2d.nets.unet2d": "litlab.domains.segmentation2d.nets",
    "litlab.domains.vision.images": "litlab.domains.vision.data",
    "litlab.domains.graph.pyg_files": "litlab.domains.graph.data",
    "litlab.domains.medical3d.medmnist3d": "litlab.domains.medical3d.data",
    "litlab.domains.graph.tudataset": "litlab.domains.graph.data",
    "litlab.config.external": "litlab.config.models",
    "litlab.tasks.static": "litlab.tasks",
    "litlab.profiling": "litlab.callbacks.summary",
    "litlab.domains.segmentation2d.files": "litlab.domains.segmentation2d.slices",
    "litlab.runs.ddp_callback": "litlab.runs.ddp",
    "litlab.data.base": "litlab.data",
    "litlab.data.splits": "litlab.data",
    "litlab.runs.predictions": "litlab.runs.summary",
}
#: the keys whose values name a class or function to build
NAME_KEYS = ("_target_", "base_target")


def current_name(name):
    """`name` with a moved module path replaced; anything else as it is."""
    if not isinstance(name, str):
        return name
    module, _, symbol = name.rpartition(".")
    return f"{MOVED[module]}.{symbol}" if module in MOVED else name


def renamed(config):
    """The stored config with moved targets renamed, in place, walked as the trust check walks
    it (`trust.config_nodes`: no recursion, no further than the depth and size it refuses);
    returned for convenience."""
    from litlab.checkpointing.trust import config_nodes

    for _, node, _ in config_nodes(config):
        for key in NAME_KEYS if isinstance(node, dict) else ():
            if key in node:
                node[key] = current_name(node[key])
    return config
