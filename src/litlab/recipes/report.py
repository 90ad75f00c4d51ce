"""The recipe of `python src/report.py path=DIR`: the folder is checked before any work
(one line, exit 2, nothing written), then `litlab.report` writes DIR/report.html."""

from omegaconf import DictConfig


def report(cfg: DictConfig):
    """Check `path`, write its report.html, print where it is; returns its path."""
    from litlab.config import validate
    from litlab.report import write_report

    settings = validate.check(cfg, "report")
    out = write_report(settings.path)
    print(f"report: {out}", flush=True)
    return out
