"""A CSVLogger that continues the metrics.csv of a resumed run instead of deleting it.

Lightning's CSV writer removes an existing metrics.csv when it starts ("Previous log files in
this directory will be deleted"), which erases the history of a run resumed in its own run
dir (`ckpt_path=last`). This one keeps the file and its columns and appends to it.
"""
import csv

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


class _AppendingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = sorted(next(csv.reader(f), []))


class ResumableCSVLogger(CSVLogger):
    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment
