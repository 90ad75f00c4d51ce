"""litlab's Optuna sweeper, found by Hydra's plugin scan (src/ is on sys.path)."""
