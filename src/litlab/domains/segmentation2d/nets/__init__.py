"""The segmentation2d domain's nets: plain nn.Modules built from config plus the datamodule's dims."""
