"""report.html of a real run and a real sweep, opened offline in headless chromium (Debian's
package; .ci/run installs it): every plot and picture renders and the page logs no error.
Slow: each trains a tiny digits run first (the k-fold comparison's page is built from job
records: its figures are what is checked here)."""

import pytest
from helpers.browser import console_errors, open_page
from helpers.report_dirs import FOLDS, fold_sweep
from helpers.runs import TINY_BUDGET, run_cli, run_dirs

pytestmark = pytest.mark.slow

FAST = [*TINY_BUDGET, "data.num_workers=0"]


def assert_renders(page) -> int:
    drawn, wanted, errors, log = open_page(page)
    assert (drawn, errors) == (wanted, 0), f"{drawn}/{wanted} plots, {errors} errors\n{log[-3000:]}"
    assert console_errors(log) == []
    return wanted


def test_run_report_opens_offline_with_every_plot(tmp_path):
    logs = tmp_path / "logs"
    run_cli("train.py", "callbacks=inspect", *FAST, log_dir=logs)
    run = run_dirs(logs)[-1]
    proc = run_cli("report.py", f"path={run}", log_dir=logs)
    page = run / "report.html"
    assert f"report: {page}" in proc.stdout
    pictures = sorted(p.name for p in (run / "inspect").glob("*.png"))
    assert {"confusion_test.png", "gradcam.png", "tsne.png"} <= set(pictures)
    text = page.read_text()
    assert text.count('data-plot="png"') == len(pictures)
    assert assert_renders(page) == len(pictures) + text.count('data-plot="plotly"') >= 6

    # the check can fail: the same page without its plotly.js draws nothing and errs
    broken = tmp_path / "broken.html"
    start = text.index("* plotly.js v")
    end = text.index("</script>", start)
    broken.write_text(text[:start] + "*/" + text[end:])
    drawn, wanted, errors, log = open_page(broken)
    assert drawn == len(pictures) < wanted and errors > 0 and console_errors(log)


def test_search_writes_its_report_at_the_end(tmp_path):
    """A 2-trial Optuna search: report.html written by the sweep itself (jobs, objective,
    Optuna's parallel coordinates and parameter importance; no group comparison: two trials of
    two configurations have no replicas to compare)."""
    logs = tmp_path / "logs"
    proc = run_cli(
        "train.py",
        "hydra.mode=MULTIRUN",
        "hparams_search=digits_cnn",
        "hydra.sweeper.pruner=null",
        "hydra.sweeper.n_trials=2",
        *FAST,
        log_dir=logs,
        timeout=400,
    )
    sweep = logs / "train" / "searches" / "digits_cnn"
    page = sweep / "report.html"
    assert f"Sweep report: {page}" in proc.stdout
    text = page.read_text()
    for heading in ("Jobs (2)", "Objective per job", "Settings against the objective"):
        assert f"<h2>{heading}</h2>" in text
    assert "Parameter importance (Optuna search)" in text and "Group comparison" not in text
    assert "Parallel Coordinate Plot" in text  # Optuna's own figure
    assert assert_renders(page) >= 3
    again = run_cli("report.py", f"path={sweep}", log_dir=logs)  # as the README shows it
    assert f"report: {page}" in again.stdout and page.read_text().count("<h2>") == text.count(
        "<h2>"
    )


def test_a_fold_sweep_page_draws_its_group_comparison(tmp_path, capsys):
    """5 folds x 2 configurations: the group means with their intervals and a point per fold
    render in the browser with the group table, next to the jobs' figures."""
    sweep = fold_sweep(tmp_path, FOLDS)
    page = sweep / "report.html"
    run_cli("report.py", f"path={sweep}", log_dir=tmp_path / "logs")
    text = page.read_text()
    assert "<h2>Group comparison</h2>" in text and "paired t on 5 pairs" in text
    assert "per group with its 95% interval (gold: best; grey: each seed or fold)" in text
    assert assert_renders(page) == 3  # objective per job, settings, group means
