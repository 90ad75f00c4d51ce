"""LightningModules, one module per domain; `nets/` holds the pure nn.Module architectures."""
