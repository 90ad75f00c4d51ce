"""The recipes, and nothing else: plain functions of a validated config that the entry points
and the Python API call (`train.train_and_test`, `report.report`; eval.py's is
litlab.export.evaluate, beside the exported files it also scores). What every run shares
whatever its recipe (its run dir, its end, DDP, its summary, tuning, `load_run`) is in
litlab.runs."""
