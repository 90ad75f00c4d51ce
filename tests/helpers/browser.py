"""A page opened in a real headless browser (Debian's chromium), offline: what its check
script counted (`<html data-check="plots:R/N errors:E">`, litlab.report.page) and what the
browser logged. Absent chromium: a skip with the reason, except on CI (CI=true: a failure;
.ci/run installs it)."""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.runs import on_ci

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--enable-unsafe-swiftshader",  # plotly's Parcoords draws with WebGL: software GL, no notice
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # offline for real: any fetch from elsewhere fails
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=10000",
]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        reason = "chromium is not installed (apt-get install chromium; .ci/run installs it)"
        if on_ci():
            pytest.fail(f"{reason}; CI=true, so this fails instead of skipping")
        pytest.skip(reason)
    return exe


def open_page(page: Path) -> tuple[int, int, int, str]:
    """(plots drawn, plots on the page, script errors, the browser's log) of `page`."""
    exe = chromium()
    with tempfile.TemporaryDirectory(prefix="litlab-chromium-") as profile:
        proc = subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    found = re.search(r'data-check="plots:(\d+)/(\d+) errors:(\d+)"', proc.stdout)
    assert found, f"the page's check did not run; chromium said:\n{proc.stderr[-3000:]}"
    drawn, wanted, errors = map(int, found.groups())
    return drawn, wanted, errors, proc.stderr


# what software WebGL itself says about its speed when plotly's Parcoords (a grid's settings
# against the objective) draws: the browser's GL layer, not the page
GL_PERFORMANCE = re.compile(r'"\[\.WebGL-\w+\]GL Driver Message \([^)]*, Performance, ')


def console_errors(log: str) -> list[str]:
    """The browser log's lines from the page's console (chromium logs console.error and
    uncaught exceptions alike, as `INFO:CONSOLE`), but the GL layer's performance notes: a
    clean report logs none."""
    return [
        line
        for line in log.splitlines()
        if (":CONSOLE" in line or "Uncaught" in line) and not GL_PERFORMANCE.search(line)
    ]
