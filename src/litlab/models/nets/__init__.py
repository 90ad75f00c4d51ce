"""Pure nn.Module architectures, built from config plus the datamodule's `dims`."""
