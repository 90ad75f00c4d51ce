"""A CSVLogger that continues the metrics.csv of a resumed run instead of deleting it.

Lightning's CSV writer removes an existing metrics.csv when it starts ("Previous log files in
this directory will be deleted"), which erases the history of a run resumed in its own run
dir (`ckpt_path=last`). This one keeps the file and its columns and appends to it.
"""

import csv

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from litlab.compat.lightning import filesystem


class _AppendingWriter(ExperimentWriter):
    def _header(self) -> list[str]:
        if not filesystem(self).isfile(self.metrics_file_path):
            return []
        with filesystem(self).open(self.metrics_file_path, "r", newline="") as f:
            return next(csv.reader(f), [])

    def _check_log_dir_exists(self) -> None:
        self.metrics_keys = sorted(self._header())

    def _record_new_keys(self) -> set[str]:
        """Keys missing from the file's header (then it is rewritten). The header is re-read:
        another copy of this writer may have grown it (under trainer=ddp_spawn the spawned
        rank 0 writes the fit's metrics, then the test's copy starts from the parent's)."""
        header = self._header()
        self.metrics_keys = sorted(set(self.metrics_keys) | set(header))
        super()._record_new_keys()
        return set(self.metrics_keys) - set(header)


class ResumableCSVLogger(CSVLogger):
    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            filesystem(self).makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment
