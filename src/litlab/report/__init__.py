"""report.html: one self-contained page of a run or a sweep (`python src/report.py path=DIR`,
docs/report.md), to look at a result without a server or the internet.

Below the sweeps layer so that a sweep's summary can write its report at the end; plotly,
matplotlib and Optuna are imported only when a page is built (`write_report`)."""

import logging
import os
import time
from pathlib import Path

from litlab.errors import UserError, one_line
from litlab.utils.files import file_type

log = logging.getLogger(__name__)
REPORT = "report.html"
VALID = (
    "a run dir (logs/train/runs/<time>, holding .hydra/config.yaml) or a sweep dir "
    "(logs/train/multiruns/<time> or logs/train/searches/<study>, holding multirun.yaml or "
    "its jobs' sweep_job.json)"
)


def _shown(path) -> str:
    """The path as a one-line message may show it (escaped, cut; as trust.shown does)."""
    text = str(path).encode("unicode_escape").decode("ascii")
    return text if len(text) <= 200 else text[:197] + "..."


def kind_of(path: str | Path) -> str:
    """The kind of folder `path` is ("run" or "sweep"), or one line naming what it is and
    what is valid."""
    folder = Path(path)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise UserError(f"path={_shown(path)} {what}; pass {VALID}")
    if (folder / ".hydra" / "config.yaml").is_file():
        kind = "run"
    elif (folder / "multirun.yaml").is_file() or any(folder.glob("*/sweep_job.json")):
        kind = "sweep"
    else:
        raise UserError(f"path={_shown(path)} is neither a run dir nor a sweep dir; pass {VALID}")
    if not os.access(folder, os.W_OK):
        raise UserError(f"path={_shown(path)} is not writable: {REPORT} is written into it")
    what = file_type(folder / REPORT, follow=False)
    if what is not None:  # a folder would end the write; a pipe or a link would be replaced
        raise UserError(
            f"path={_shown(path)}: its {REPORT} is {what}, not a file; the page is written "
            f"there as a file: move that {REPORT} away, or remove it"
        )
    return kind


def build(folder: Path, kind: str) -> str:
    """The page's HTML (plotly, matplotlib and Optuna are imported here)."""
    from litlab.report.page import Page, add_run, add_sweep, relative

    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    shown = relative(str(folder.resolve()))  # no absolute path: the page is shared
    shown = folder.resolve().name if Path(shown).is_absolute() else shown
    page = Page(f"litlab {kind} report: {folder.name}", f"{shown} (written {stamp})")
    (add_run if kind == "run" else add_sweep)(page, folder)
    return page.html()


def write_report(path: str | Path) -> Path:
    """<path>/report.html of a run or sweep dir; returns its path."""
    folder = Path(path)
    out = folder / REPORT
    write_atomically(out, build(folder, kind_of(folder)))  # an old page stays until then
    return out


def write_atomically(path: Path, text: str) -> None:
    """`text` into `path` through a temp file beside it: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)  # a link left there would be written through
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_quietly(sweep_dir: Path) -> Path | None:
    """The report at the end of a sweep: a failure is one warning line, never the sweep's."""
    try:
        out = write_report(sweep_dir)
    except Exception as err:  # noqa: BLE001  (the sweep's results are written already)
        log.warning("the sweep's %s was not written: %s", REPORT, one_line(err, with_type=True))
        return None
    print(f"Sweep report: {out}", flush=True)
    return out
