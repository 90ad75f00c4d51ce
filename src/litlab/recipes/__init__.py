"""The recipes, and nothing else: plain functions of a validated config that the entry points
and the Python API call (`train.train_and_test`, `evaluate.evaluate_checkpoint`,
`report.report`). What every run shares whatever its recipe (its run dir, its end, DDP, its
summary, tuning, `load_run`) is in litlab.runs."""
