"""The learning tasks, named once. A datamodule declares the task it serves (`task = ...`), a
LightningModule the tasks it fits (`tasks = (...)`); `litlab.config.build` refuses a pair whose
tasks differ. A new domain adds its name here."""

IMAGE_CLASSIFICATION = "image_classification"
VOLUME_CLASSIFICATION = "volume_classification"
VOLUME_SEGMENTATION = "volume_segmentation"
NODE_CLASSIFICATION = "node_classification"
GRAPH_CLASSIFICATION = "graph_classification"
