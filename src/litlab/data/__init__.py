"""What every domain's datamodules share: the split-and-load base (litlab.data.base),
seeded splits and k-fold; the domains' own datamodules are in litlab.domains."""
