"""The recipes: plain functions of a validated config, the Python API's and the entry points'
(train, evaluate, tuning, the Results block and report pages, `load_run`). What every run shares
whatever its recipe (its run dir, its end, DDP) is in litlab.runs."""
