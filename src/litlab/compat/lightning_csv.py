"""Lightning's CSV ExperimentWriter, kept from deleting a resumed run's metrics.csv (checked
against lightning 2.6.6 by `litlab.compat.lightning.check_lightning`): its private
`_check_log_dir_exists` (which deletes the file) and `_record_new_keys` (which rewrites the
header from the keys it holds) are overridden here, behind the fence, and nowhere else.
A module of its own: it imports Lightning's loggers, which `compat.lightning` does lazily."""

import csv

from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from litlab.compat.lightning import filesystem


class AppendingWriter(ExperimentWriter):
    """Keeps an existing metrics.csv and its columns, and appends to it."""

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


def appending_experiment(logger) -> AppendingWriter:
    """A CSVLogger's writer, made once (Lightning keeps it in `_experiment`): an
    AppendingWriter in the logger's log dir."""
    if logger._experiment is None:
        filesystem(logger).makedirs(logger.root_dir, exist_ok=True)
        logger._experiment = AppendingWriter(log_dir=logger.log_dir)
    return logger._experiment
