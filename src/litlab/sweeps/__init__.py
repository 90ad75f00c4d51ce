"""Sweeps: the multirun summary (a Hydra callback) and the Optuna search behind
`python src/train.py -m hparams_search=NAME` (the sweeper plugin lives in src/hydra_plugins)."""
