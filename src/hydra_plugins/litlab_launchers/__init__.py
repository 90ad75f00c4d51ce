"""litlab's submitit launchers, found by Hydra's plugin scan (src/ is on sys.path)."""
