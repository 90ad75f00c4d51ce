"""A CSVLogger that continues the metrics.csv of a resumed run instead of deleting it.

Lightning's CSV writer removes an existing metrics.csv when it starts ("Previous log files in
this directory will be deleted"), which erases the history of a run resumed in its own run
dir (`ckpt_path=last`). This one keeps the file and its columns and appends to it.
"""

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from litlab.compat.lightning_csv import appending_experiment


class ResumableCSVLogger(CSVLogger):
    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        return appending_experiment(self)
