"""litlab's grid sweeper, registered as Hydra's `hydra/sweeper=basic` (found by Hydra's plugin scan)."""
