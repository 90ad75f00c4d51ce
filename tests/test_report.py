"""`python src/report.py path=DIR` (litlab.report): report.html of a run or a sweep, built here
from tiny files (no training): its sections, what is missing said on the page, nothing fetched
from elsewhere, the files shown treated as data, and bad paths refused in one line. Real runs
opened in headless chromium: tests/test_report_browser.py (slow)."""

import json
import re
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.refusals import refused
from helpers.report_dirs import FOLDS, fake_sweep, fold_sweep, sweep_record
from helpers.runs import ROOT

from litlab import report
from litlab.recipes import report as report_recipe

HOSTILE = "</script><script>alert(1)</script>"


def tiny_png() -> bytes:
    """A valid 2x2 grey PNG (standard library only)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80\x80" for _ in range(2))
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def fake_run(root: Path, pictures: bool = True) -> Path:
    run = root / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        f"model:\n  lr: 0.01\nseed: 42\nnote: '{HOSTILE}'\n"
    )
    (run / ".hydra" / "overrides.yaml").write_text("- seed=42\n")
    (run / "csv").mkdir()
    (run / "csv" / "metrics.csv").write_text(
        "epoch,lr-AdamW,step,train/loss,val/loss,val/acc,test/acc\n"
        ",0.01,0,,,,\n0,,9,1.2,,,\n0,,9,,1.0,0.6,\n1,,19,0.7,,,\n1,,19,,0.5,0.8,\n1,,20,,,,0.79\n"
    )
    metrics = {"val/acc": 0.8, "test/acc": 0.79, HOSTILE: 1.0, "bad": "nan"}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "provenance.json").write_text(
        json.dumps({"code": {"commit": "abc123", "dirty": False}, "packages": {"torch": "2.9"}})
    )
    if pictures:
        (run / "inspect").mkdir()
        (run / "inspect" / "confusion_test.png").write_bytes(tiny_png())
        (run / "inspect" / "tsne.png").write_bytes(tiny_png())
    return run


class Resources(HTMLParser):
    """Every src/href of the page's tags (the text inside <script> is not tags)."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.links += [v for k, v in attrs if k in ("src", "href") and v]


def external(page: str) -> list[str]:
    parser = Resources()
    parser.feed(page)
    return [link for link in parser.links if not link.startswith("data:")]


def test_run_report_has_every_section_and_needs_nothing_from_elsewhere(tmp_path):
    run = fake_run(tmp_path)
    page = report.write_report(run).read_text()
    for heading in ("Learning curves", "Final metrics", "Inspect pictures", "Config", "Provenance"):
        assert f"<h2>{heading}</h2>" in page
    assert page.count('data-plot="png"') == 2  # confusion_test.png, tsne.png as data URIs
    assert page.count('data-plot="png" src="data:image/png;base64,') == 2
    assert page.count('data-plot="plotly"') == 3  # learning rate, loss, acc
    assert page.count("* plotly.js v") == 1  # the library, embedded once for every figure
    assert "Not in this run: confusion_val.png, gradcam.png, samples.png" in page
    assert "abc123" in page and "seed=42" in page
    assert external(page) == []
    assert HOSTILE not in page  # a metric name from the file: escaped, never markup
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert list(run.glob(".report.html*")) == []  # no temporary file left


def test_run_without_pictures_or_metrics_says_what_is_missing(tmp_path):
    run = fake_run(tmp_path, pictures=False)
    (run / "metrics.json").unlink()
    (run / "provenance.json").write_text("[1, 2]")
    page = report.write_report(run).read_text()
    assert (
        "No inspect pictures in this run (inspect/*.png): python src/train.py callbacks=inspect"
        in page
    )
    assert "No final metrics: metrics.json is absent" in page
    assert "No provenance: provenance.json is not a mapping" in page
    assert 'data-plot="png"' not in page


def test_a_picture_linked_from_outside_the_run_is_not_shown(tmp_path):
    """The files of a run dir are data: a link out of it (or a file that is no PNG) is not
    read into the page."""
    run = fake_run(tmp_path)
    secret = tmp_path / "outside.png"
    secret.write_bytes(tiny_png() + b"SECRET")
    (run / "inspect" / "gradcam.png").symlink_to(secret)
    (run / "inspect" / "samples.png").write_bytes(b"<svg onload=alert(1)>")
    (run / "csv" / "metrics.csv").unlink()
    (run / "csv" / "metrics.csv").symlink_to(secret)
    page = report.write_report(run).read_text()
    assert page.count('data-plot="png"') == 2
    assert "No learning curves" in page
    assert "onload" not in page


def test_sweep_report_with_a_failed_job_renders_and_says_so(tmp_path):
    records = [
        sweep_record(0, "completed", 0.7),
        sweep_record(1, "failed", None, error=f"ValueError: {HOSTILE}"),
        sweep_record(2, "completed", 0.9),
        sweep_record(3, "running", None),
        "not a record",
    ]
    sweep = fake_sweep(tmp_path, records)
    (tmp_path / "other").mkdir()
    elsewhere = fake_sweep(tmp_path / "other", [sweep_record(7, "completed", 0.99)])
    (sweep / "linked").symlink_to(elsewhere / "0")  # a job dir linking out: not entered
    (sweep / "optuna.db").write_bytes(b"not a database")
    (sweep / "summary_stats.csv").write_text(
        "group,metric,n,mean,std\nall jobs,val/acc,2,0.8,0.14\nall jobs,test/acc,2,0.8,0.14\n"
    )
    page = report.write_report(sweep).read_text()
    for heading in ("Jobs (4)", "Objective per job", "Settings against the objective"):
        assert f"<h2>{heading}</h2>" in page
    assert '<tr class="best"><td>2</td><td>completed (best)</td>' in page
    assert "2 of 4 jobs did not complete (job 1: failed, job 3: incomplete)" in page
    assert "Job records left out (not as the sweep writes them): 4/sweep_job.json" in page
    assert "No parameter importance: optuna.db cannot be read as an Optuna study" in page
    assert "<td>7</td>" not in page  # the job behind the link
    assert "<h2>Group comparison</h2>" in page  # from the CSV: no interval, no replicas
    assert "<td>all jobs</td><td>2</td><td>0.8000 ± 0.1400</td><td></td>" in page
    assert page.count('data-plot="plotly"') == 3  # objective, parallel coordinates, groups
    assert HOSTILE not in page and external(page) == []


def test_a_sweep_whose_jobs_left_no_record_yet_renders(tmp_path):
    page = report.write_report(fake_sweep(tmp_path, [])).read_text()
    assert "No job records (sweep_job.json) in this sweep dir yet" in page
    assert "<h2>Jobs (0)</h2>" in page and external(page) == []


def test_a_fold_sweep_report_compares_its_groups(tmp_path, capsys):
    """5 folds x 2 configurations: a table per metric (mean, interval and its method, the
    difference to the best with its interval, the test named, the verdict in words, n), the
    plot of the group means with a point per fold, the best group's jobs marked; no Optuna
    section for a grid, no pooled row, no absolute path."""
    sweep = fold_sweep(tmp_path, FOLDS)
    page = report.write_report(sweep).read_text()
    headings = re.findall(r"<h2>([^<]*)</h2>", page)
    assert headings == [
        "Jobs (10)",
        "Objective per job",
        "Group comparison",
        "Settings against the objective",
    ]
    rows = re.findall(r"<tr( class=\"best\")?><td>(\d)</td><td>completed( \(best group\))?", page)
    assert [(job, bool(best)) for _, job, best in rows] == [(str(i), i < 5) for i in range(10)]
    columns = "".join(
        f"<th>{c}</th>"
        for c in (
            *("group", "n", "mean ± std", "95% interval", "interval method"),
            *("difference to the best", "test", "verdict"),
        )
    )
    assert f"<p>val/acc (the objective)</p>\n<table><tr>{columns}</tr>" in page
    best = (
        '<tr class="best"><td>model.net.dropout=0.3 (best)</td><td>5</td><td>0.9240 ± 0.0702'
        "</td><td>[0.8368, 1.0000]</td><td>Student t, cut to [0, 1]</td><td></td><td></td>"
        "<td>the best group</td>"
    )
    assert best in page
    other = re.search(r"<tr><td>model.net.dropout=0.1</td><td>5</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", other)
    assert cells[2:] == [
        "Student t, cut to [0, 1]",
        "-0.0080 [-0.0184, 0.0024]",  # scipy's ttest_rel: p 0.0993, [-0.01839, 0.00239]
        "paired t on 5 pairs, p=0.099",
        "within noise of the best",
    ]
    assert "all jobs" not in page and "Parameter importance" not in page
    assert "Intervals: Student&#x27;s t interval of the mean" in page
    assert "the other metrics: test/acc" in page  # folded below the objective's table
    assert page.count('data-plot="plotly"') == 3  # objective per job, settings, groups
    assert page.count('"data.fold=0"') == 1 and '"data.fold=4"' in page  # a trace per fold
    assert str(tmp_path) not in page and external(page) == []


def test_partly_paired_groups_and_hostile_statistics_on_the_page(tmp_path, capsys):
    """A fold missing in one group: the row says the test and which fold it left out. Rows of
    summary_stats.json that do not have the summary's shape are left out; texts are escaped."""
    sweep = fold_sweep(tmp_path, {"0.3": FOLDS["0.3"], "0.1": FOLDS["0.1"][:4]})
    page = report.write_report(sweep).read_text()
    assert (
        "paired t on 4 pairs, p=0.092 (paired on the 4 replicas both groups have; left out: "
        "data.fold=4)"
    ) in page
    stats = json.loads((sweep / "summary_stats.json").read_text())
    stats["groups"] += [
        "not a row",
        {"group": HOSTILE, "metric": "val/acc", "n": 2, "mean": 0.5, "replicas": "x"},
        {"group": "nan", "metric": "val/acc", "mean": "NaN"},
    ]
    stats["best_group"] = ["not", "a", "name"]
    (sweep / "summary_stats.json").write_text(json.dumps(stats))
    page = report.write_report(sweep).read_text()
    assert HOSTILE not in page and "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert "<td>nan</td>" not in page and "the best group" not in page


def test_a_grid_without_replicas_shows_no_empty_section(tmp_path, capsys):
    """One job per configuration: no statistics to show (no Group comparison), no Optuna study
    (no parameter importance); every section on the page has something in it."""
    from litlab.sweeps.summary import load_records, write_summary

    sweep = fake_sweep(
        tmp_path, [sweep_record(0, "completed", 0.7), sweep_record(1, "completed", 0.8)]
    )
    page = report.write_report(sweep).read_text()
    assert "No group comparison: summary_stats.json and summary_stats.csv are absent" in page
    write_summary(sweep, load_records(sweep), plot=False)
    page = report.write_report(sweep).read_text()
    headings = re.findall(r"<h2>([^<]*)</h2>", page)
    assert headings == ["Jobs (2)", "Objective per job", "Settings against the objective"]
    assert not re.search(r"</h2>\s*</section>", page)


def test_paths_inside_the_project_are_shown_relative_to_it(tmp_path):
    """An error naming a file of the project shows it from the project's folder; the folder
    reported on, outside the project here, is shown by its name."""
    from litlab.report.page import PROJECT, relative

    assert (
        relative(f"{PROJECT}/logs/train/x is gone; cd {PROJECT}.") == "logs/train/x is gone; cd .."
    )
    assert relative(f"{PROJECT}2/logs") == f"{PROJECT}2/logs"  # another folder
    error = f"UserError: data.path={PROJECT}/data/t.csv is not a file"
    sweep = fake_sweep(tmp_path, [sweep_record(0, "failed", None, error=error)])
    page = report.write_report(sweep).read_text()
    assert "UserError: data.path=data/t.csv is not a file" in page and PROJECT not in page
    assert "<p>sweep (written " in page and str(tmp_path) not in page


def bad_path(tmp: Path, kind: str) -> Path:
    if kind == "a-file":
        (tmp / "file.txt").write_text("x")
        return tmp / "file.txt"
    if kind == "an-empty-folder":
        (tmp / "empty").mkdir()
        return tmp / "empty"
    if kind == "the-folder-above-a-run":
        return fake_run(tmp).parent
    if kind == "a-newline-in-it":
        return tmp / "two\nlines"
    return tmp / "absent"


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("absent", "does not exist; pass a run dir"),
        ("a-file", "is not a folder; pass a run dir"),
        ("an-empty-folder", "is neither a run dir nor a sweep dir; pass a run dir"),
        ("the-folder-above-a-run", "is neither a run dir nor a sweep dir; pass a run dir"),
        ("a-newline-in-it", "does not exist; pass a run dir"),
    ],
)
def test_a_path_that_is_no_run_or_sweep_is_refused_before_any_work(kind, expected, tmp_path):
    target = bad_path(tmp_path, kind)
    before = sorted(tmp_path.rglob("*"))
    line, _ = refused("report", [f"path='{target}'"], report_recipe, tmp_path / "logs")
    shown = str(target).replace("\n", "\\n")  # one line: a newline is shown escaped
    assert line.startswith(f"path={shown} {expected}")
    assert sorted(p for p in tmp_path.rglob("*") if "logs" not in p.parts) == before


def test_report_command_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "src/report.py", f"paths.log_dir={tmp_path / 'logs'}", f"path={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        f"error: path={tmp_path} is neither"
    )
    assert not list(tmp_path.rglob("report.html"))
    runs = tmp_path / "logs" / "report" / "runs"
    assert not runs.exists() or not list(runs.iterdir())


def test_a_failing_report_at_the_end_of_a_sweep_is_one_warning(tmp_path, caplog, monkeypatch):
    """SweepSummary writes the report last: its failure must never fail the sweep."""
    sweep = fake_sweep(tmp_path, [sweep_record(0, "completed", 0.7)])

    def broken(folder, kind):
        raise RuntimeError("plotly broke\nsecond line")

    monkeypatch.setattr("litlab.report.build", broken)
    assert report.write_quietly(sweep) is None
    assert [r.getMessage() for r in caplog.records] == [
        "the sweep's report.html was not written: RuntimeError: plotly broke"
    ]
    assert not (sweep / "report.html").exists() and not list(sweep.glob(".report*"))


@pytest.mark.parametrize("report_on", [True, False])
def test_the_sweep_writes_its_report_unless_told_not_to(tmp_path, report_on):
    """hydra.callbacks.sweep_summary.report=false: the summary without report.html."""
    from omegaconf import OmegaConf

    from litlab.sweeps.summary import SweepSummary

    sweep = fake_sweep(tmp_path, [sweep_record(0, "completed", 0.7)])
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}})
    assert SweepSummary(plot=False, report=report_on)._finish(config) is False
    assert (sweep / "summary.csv").is_file()
    assert (sweep / "report.html").is_file() is report_on
