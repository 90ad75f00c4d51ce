"""report.html: one self-contained page of a run or a sweep (`python src/report.py path=DIR`,
docs/report.md), to look at a result without a server or the internet.

Below the sweeps layer so that a sweep's summary can write its report at the end; plotly,
matplotlib and Optuna are imported only when a page is built (`writer.write_report`)."""

from litlab.report.writer import REPORT, kind_of, write_quietly, write_report

__all__ = ["REPORT", "kind_of", "write_quietly", "write_report"]
