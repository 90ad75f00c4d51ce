"""LightningDataModules, one module per domain."""
