"""The recipe of `python src/report.py path=DIR`: the folder is checked before any work
(one line, exit 2, nothing written), then `litlab.report` writes DIR/report.html."""

from omegaconf import DictConfig

from litlab.config.settings import EntrySettings


class ReportSettings(EntrySettings):
    #: a run dir or a sweep dir (litlab.report.writer.VALID)
    path: str = ""

    def check_files(self) -> None:
        from litlab.report import kind_of

        kind_of(self.path)


def report(cfg: DictConfig):
    """Check `path`, write its report.html, print where it is; returns its path."""
    from litlab.config.validate import entry_config
    from litlab.report import write

    settings = entry_config(cfg, ReportSettings)
    out = write(settings.path)
    print(f"report: {out}", flush=True)
    return out
