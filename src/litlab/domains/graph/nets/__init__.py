"""The graph domain's nets: plain nn.Modules built from config plus the datamodule's dims."""
