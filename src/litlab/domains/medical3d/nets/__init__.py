"""The medical3d domain's nets: plain nn.Modules built from config plus the datamodule's dims."""
