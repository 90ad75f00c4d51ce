"""The HTML of a report (what each section of a run's or a sweep's page shows: docs/report.md),
in one file that needs no network: plotly.js is embedded once (with the first figure), pictures
are base64 data URIs, the style is inline. Every text from the files shown is escaped, and
paths inside the project are shown relative to it. A section says what is missing instead of
failing, and one that does not apply to this sweep is left out rather than shown empty.

The summary's statistics files are data: each row is kept only with the shape the summary
writes (a group name, a metric, a finite mean), every number is read by `files.number`.

A small inline script counts the plots that rendered and the page's script errors into
`<html data-check="plots:R/N errors:E">`, which the headless-browser test reads."""

import base64
import contextlib
import html
import re
from pathlib import Path

from litlab.report import figures, files
from litlab.utils.code_state import CODE_ROOT, snapshot_origin

# the project folder (where logs/ and data/ live; a sweep's code snapshot names its origin)
PROJECT = str((snapshot_origin() or CODE_ROOT).resolve())
_IN_PROJECT = re.compile(re.escape(PROJECT) + r"(/|(?![\w\-]|\.[\w\-]))")

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4} tr.best td{background:#fff6d5} tr.bad td{color:#a00}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em;max-height:40em}
.missing{color:#8a5a00;background:#fff8e6;border-left:4px solid #e0a000;padding:.5em 1em}
.pictures{display:flex;flex-wrap:wrap;gap:1em} figure{margin:0}
figure img{max-width:560px;border:1px solid #eee} figcaption{font-size:.85em;color:#555}
details summary{cursor:pointer;margin:.5em 0}
"""

CHECK = """
window.litlabErrors = [];
window.addEventListener("error", function (e) { window.litlabErrors.push(String(e.message)); });
(function () {
  var original = console.error;
  console.error = function () {
    window.litlabErrors.push(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
window.addEventListener("load", function () {
  setTimeout(function () {
    var wanted = document.querySelectorAll("[data-plot]"), drawn = 0;
    wanted.forEach(function (el) {
      if (el.tagName === "IMG" ? el.complete && el.naturalWidth > 0
          : el.querySelector(".js-plotly-plot .main-svg")) { drawn += 1; }
    });
    document.documentElement.setAttribute("data-check",
      "plots:" + drawn + "/" + wanted.length + " errors:" + window.litlabErrors.length);
  }, 300);
});
"""


def relative(text: str) -> str:
    """`text` with paths inside the project relative to it (`<project>/logs/x` -> `logs/x`,
    the project itself `.`): a page is shared, and the folder it was made in is nobody's
    business and does not exist elsewhere."""
    return _IN_PROJECT.sub(lambda m: "" if m.group(1) else ".", text)


def esc(value) -> str:
    return html.escape(relative("" if value is None else str(value)))


def cell(value) -> str:
    """A table cell: numbers (also those read from CSV text) to 4 significant digits."""
    if isinstance(value, str) and "." in value:
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return esc(value)


class Page:
    """A report page: `add` sections, then `html()`."""

    def __init__(self, title: str, subtitle: str):
        self.title, self.subtitle = title, subtitle
        self.sections: list[str] = []
        self._plotly_embedded = False

    def add(self, heading: str, *parts: str) -> None:
        body = "\n".join(parts)
        self.sections.append(f"<section><h2>{esc(heading)}</h2>\n{body}</section>")

    def figure(self, fig) -> str:
        """A plotly figure (plotly.js goes inline with the first one)."""
        body = fig.to_html(
            full_html=False,
            include_plotlyjs=not self._plotly_embedded,
            config={"displaylogo": False, "responsive": True},
        )
        self._plotly_embedded = True
        return f'<div class="plot" data-plot="plotly">{relative(body)}</div>'

    @staticmethod
    def picture(data: bytes, caption: str) -> str:
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        return (
            f'<figure><img data-plot="png" src="{uri}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>"
        )

    @staticmethod
    def table(rows: list[dict], columns: list[str], classes: list[str] | None = None) -> str:
        head = "".join(f"<th>{esc(c)}</th>" for c in columns)
        body = ""
        for i, row in enumerate(rows):
            kind = f' class="{classes[i]}"' if classes and classes[i] else ""
            cells = "".join(f"<td>{cell(row.get(c))}</td>" for c in columns)
            body += f"<tr{kind}>{cells}</tr>"
        return f"<table><tr>{head}</tr>{body}</table>"

    @staticmethod
    def missing(text: str) -> str:
        return f'<p class="missing">{esc(text)}</p>'

    def add_missing(self, heading: str, text: str) -> None:
        """A section that says what it lacks, and why, instead of failing."""
        self.add(heading, self.missing(text))

    @staticmethod
    def text(text: str) -> str:
        return f"<p>{esc(text)}</p>"

    @staticmethod
    def details(summary: str, *parts: str) -> str:
        """Parts folded under a one-line summary (opened by a click)."""
        return f"<details><summary>{esc(summary)}</summary>\n" + "\n".join(parts) + "</details>"

    @staticmethod
    def pre(text: str) -> str:
        return f"<pre>{esc(text)}</pre>"

    def html(self) -> str:
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(self.title)}</title><style>{STYLE}</style><script>{CHECK}</script>"
            f"</head><body><h1>{esc(self.title)}</h1><p>{esc(self.subtitle)}</p>\n"
            + "\n".join(self.sections)
            + "\n</body></html>\n"
        )


# -------------------------------------------------------------- run page
# inspect/ pictures in the order shown, with what they are (docs/inspect.md); others follow
PICTURES = {
    "confusion_val.png": "confusion matrix, validation (rows: true class)",
    "confusion_test.png": "confusion matrix, test (rows: true class)",
    "gradcam.png": "Grad-CAM on test samples",
    "tsne.png": "t-SNE of the test samples' features",
    "samples.png": "test samples: true/predicted (3D: masks over the middle slice)",
}
INSPECT_HINT = (
    "python src/train.py callbacks=inspect draws confusion matrices, Grad-CAM, t-SNE and "
    "sample overlays"
)


def add_run(page: Page, run: Path) -> None:
    curves(page, run)
    final_metrics(page, run)
    pictures(page, run)
    config(page, run)
    provenance(page, run)


def curves(page: Page, run: Path) -> None:
    found = files.walk(run / "csv", "metrics.csv") if (run / "csv").is_dir() else []
    rows = files.read_csv(run, found[0].relative_to(run)) if found else None
    if not rows:
        page.add_missing(
            "Learning curves",
            "No learning curves: csv/metrics.csv is absent or empty (the CSV logger, on by "
            "default, writes it once the first epoch ends)",
        )
        return
    plots = [page.figure(f) for f in figures.learning_curves(rows)]
    page.add("Learning curves", *(plots or [page.missing("csv/metrics.csv has no numbers")]))


def final_metrics(page: Page, run: Path) -> None:
    data, problem = files.read_json_under(run, "metrics.json")
    values = {str(k): files.number(v) for k, v in data.items()} if isinstance(data, dict) else {}
    rows = [{"metric": k, "value": v} for k, v in sorted(values.items()) if v is not None]
    if not rows:
        why = problem or "metrics.json holds no metrics"
        page.add_missing(
            "Final metrics", f"No final metrics: {why} (a run writes it when it has tested)"
        )
        return
    page.add("Final metrics", page.table(rows, ["metric", "value"]))


def pictures(page: Page, run: Path) -> None:
    names = sorted(p.name for p in (run / "inspect").glob("*.png"))  # none without the folder
    order = [n for n in PICTURES if n in names] + [n for n in names if n not in PICTURES]
    shown = [(n, data) for n in order if (data := files.png(run, Path("inspect") / n))]
    if not shown:
        why = f"No inspect pictures in this run (inspect/*.png): {INSPECT_HINT}"
        page.add_missing("Inspect pictures", why)
        return
    parts = ['<div class="pictures">']
    parts += [page.picture(data, f"{PICTURES.get(n, n)} ({n})") for n, data in shown]
    parts.append("</div>")
    absent = [n for n in PICTURES if n not in names]
    if absent:
        parts.append(
            page.missing(
                f"Not in this run: {', '.join(absent)} (each is drawn only for the tasks it "
                "applies to; docs/inspect.md)"
            )
        )
    for split in ("val", "test"):
        rows = files.read_csv(run, f"inspect/per_class_{split}.csv")
        if rows:
            parts += [page.text(f"per class, {split}"), page.table(rows, list(rows[0]))]
    page.add("Inspect pictures", *parts)


def config(page: Page, run: Path) -> None:
    parts = []
    for name, what in (("overrides.yaml", "command-line overrides"), ("config.yaml", "config")):
        text = files.read_text(run, Path(".hydra") / name)
        parts += [page.text(what), page.pre(text)] if text is not None else []
    page.add("Config", *(parts or [page.missing(".hydra/config.yaml cannot be read")]))


def provenance(page: Page, run: Path) -> None:
    data, problem = files.read_json_under(run, "provenance.json")
    if not isinstance(data, dict):
        why = problem or "provenance.json is not a mapping"
        page.add_missing(
            "Provenance", f"No provenance: {why} (train.py writes it when training starts)"
        )
        return
    parts = []
    for part in ("code", "packages"):
        value = data.get(part)
        if isinstance(value, dict):
            rows = [{"name": k, "value": v} for k, v in value.items()]
            parts += [page.text(part), page.table(rows, ["name", "value"])]
    data_files = data.get("data")
    if isinstance(data_files, dict):
        parts.append(page.text(f"data: SHA-256 of {len(data_files)} file(s) in provenance.json"))
    page.add("Provenance", *(parts or [page.missing("provenance.json holds no code or packages")]))


# ------------------------------------------------------------ sweep page
SHOWN_METRICS = ("val/", "test/")


def add_sweep(page: Page, sweep: Path) -> None:
    found, unreadable = files.load_jobs(sweep)
    stats = read_groups(sweep)
    best = best_jobs(stats)
    in_group = bool(best)
    if not best and (one := files.best_job(found)) is not None:
        best = {one}
    objective = next((j["objective_name"] for j in found), "objective")
    jobs_table(page, found, unreadable, best, objective, in_group)
    if not found:
        return
    add_groups(page, sweep, stats, objective)
    has_study = files.inside(sweep, "optuna.db") is not None
    with figures.opened(sweep) as (the_study, why):
        settings(page, found, objective, the_study, has_study)
        if has_study:
            page.add("Parameter importance (Optuna search)", importance(page, the_study, why))


def jobs_table(
    page: Page, found: list[dict], unreadable: list[str], best: set, objective: str, in_group: bool
) -> None:
    """The jobs, the best one's (or the best group's) highlighted."""
    parts = [] if found else [page.missing("No job records (sweep_job.json) in this sweep dir yet")]
    keys = list(dict.fromkeys(k for j in found for k in j["settings"]))
    marked = " (best group)" if in_group else " (best)"
    metrics = sorted({m for j in found for m in j["metrics"] if m.startswith(SHOWN_METRICS)})
    named = f"objective ({objective})"
    rows = [
        {
            "job": j["job"],
            "status": j["status"] + (marked if j["job"] in best else ""),
            named: j["objective"],
            **j["settings"],
            **{m: j["metrics"].get(m) for m in metrics},
            "wall_s": j["wall_s"],
            "folder": j["folder"],
            "error": j["error"],
        }
        for j in found
    ]
    classes = [
        "best" if j["job"] in best else "bad" if j["status"] != "completed" else "" for j in found
    ]
    columns = ["job", "status", named, *keys, *metrics, "wall_s", "folder", "error"]
    if found:
        parts.append(page.table(rows, columns, classes))
    bad = [j for j in found if j["status"] != "completed"]
    if bad:
        which = ", ".join(f"job {j['job']}: {j['status']}" for j in bad)
        text = f"{len(bad)} of {len(found)} jobs did not complete ({which}): they have no objective"
        parts.append(page.missing(f"{text} and no metrics; their errors are in the table"))
    if unreadable:
        left = ", ".join(unreadable)
        parts.append(page.missing(f"Job records left out (not as the sweep writes them): {left}"))
    page.add(f"Jobs ({len(found)})", *parts)
    if found:
        chart = figures.objective_per_job(found, objective, best)
        page.add("Objective per job", page.figure(chart))


def settings(page: Page, found: list[dict], objective: str, the_study, has_study: bool) -> None:
    """Optuna's parallel coordinates for a search (its reason when it cannot draw them), the
    grid's settings otherwise; left out when no setting varies."""
    if has_study and the_study is not None:
        fig, problem = figures.plot("parallel", the_study)
        if fig is None:
            page.add_missing(
                "Settings against the objective", f"No parallel coordinates: {problem}"
            )
            return
    else:
        keys = list(dict.fromkeys(k for j in found for k in j["settings"]))
        fig = figures.parallel_coordinates(found, keys, objective)
    if fig is not None:
        page.add("Settings against the objective", page.figure(fig))


def importance(page: Page, the_study, why: str) -> str:
    fig, problem = figures.plot("importance", the_study) if the_study is not None else (None, why)
    if fig is None:
        return page.missing(f"No parameter importance: {problem}")
    return page.figure(fig)


# ---------------------------------------------------------------- groups
NUMBERS = (
    *("n", "mean", "std", "ci95_low", "ci95_high", "n_pairs", "diff"),
    *("diff_ci95_low", "diff_ci95_high", "p", "p_holm", "wilcoxon_p"),
)
KEYS = ("best_group", "objective", "mode")
TEXTS = ("group", "metric", "ci_method", "test", "verdict", "note", "best_group")


def _row(raw) -> dict | None:
    """A statistics row as plain values (numbers or None, texts), or None when it is none (a
    row of a group or a comparison always has a group, a metric and a finite mean or diff)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("group"), str):
        return None
    row = {k: files.number(raw.get(k)) for k in NUMBERS}
    row |= {k: raw[k] if isinstance(raw.get(k), str) else "" for k in TEXTS}
    replicas = raw.get("replicas") if isinstance(raw.get("replicas"), list) else []
    row["replicas"] = [
        {"replica": str(r.get("replica", "")), "job": r.get("job"), "value": v}
        for r in replicas
        if isinstance(r, dict) and (v := files.number(r.get("value"))) is not None
    ]
    finite = row["mean"] is not None or row["diff"] is not None
    return row if row["metric"] and finite else None


def read_groups(sweep: Path) -> dict | None:
    """{best_group, objective, mode, interval_method, tests, rule, groups, comparisons} from
    summary_stats.json, else from summary_stats.csv; None when neither can be read."""
    data, _ = files.read_json_under(sweep, "summary_stats.json")
    if isinstance(data, dict) and isinstance(data.get("groups"), list):
        out = {k: data[k] for k in KEYS if isinstance(data.get(k), str)}
        out |= {k: str(data[k]) for k in ("interval_method", "tests", "rule") if k in data}
        for key in ("groups", "comparisons"):
            rows = data.get(key) if isinstance(data.get(key), list) else []
            out[key] = [r for r in map(_row, rows) if r is not None]
        return out
    rows = files.read_csv(sweep, "summary_stats.csv")
    if not rows:
        return None
    groups = [r for r in map(_row, rows) if r is not None]
    best = next((r["group"] for r in rows if r.get("best") == "*"), None)
    comparisons = [r for r in groups if r["diff"] is not None]
    return dict.fromkeys(KEYS) | {"best_group": best, "groups": groups, "comparisons": comparisons}


def best_jobs(stats: dict | None) -> set:
    """The job numbers of the best group (from its replicas), empty when unknown."""
    if not stats or not stats.get("best_group"):
        return set()
    return {
        r["job"]
        for row in stats["groups"]
        if row["group"] == stats["best_group"]
        for r in row["replicas"]
        if isinstance(r["job"], int)
    }


def add_groups(page: Page, sweep: Path, stats: dict | None, objective: str) -> None:
    """The section: what the comparison rests on, a table per metric (the objective first),
    the plot of the objective's group means with their replicas."""
    if stats is None:
        page.add_missing(
            "Group comparison",
            "No group comparison: summary_stats.json and summary_stats.csv are absent or "
            "unreadable (the sweep's summary writes them when jobs complete)",
        )
        return
    if not stats["groups"]:
        return  # no replicas, or nothing completed: nothing to compare (the jobs table says)
    objective = stats.get("objective") or objective
    metrics = list(dict.fromkeys([objective, *(r["metric"] for r in stats["groups"])]))
    parts = [page.text(line) for line in _method_lines(stats)]
    chart = figures.group_means(
        [r for r in stats["groups"] if r["metric"] == objective], objective, stats.get("best_group")
    )
    parts += [page.figure(chart)] if chart is not None else []
    tables = {}
    for metric in metrics:
        rows, classes = _table_rows(stats, metric)
        if rows:
            tables[metric] = page.table(rows, list(rows[0]), classes)
    if objective in tables:
        parts += [page.text(f"{objective} (the objective)"), tables.pop(objective)]
    if tables:
        others = [part for m, table in tables.items() for part in (page.text(m), table)]
        parts.append(page.details(f"the other metrics: {', '.join(tables)}", *others))
    page.add("Group comparison", *parts)


def _method_lines(stats: dict) -> list[str]:
    lines = []
    if stats.get("best_group"):
        mode = {"max": "highest", "min": "lowest"}.get(stats.get("mode", ""), "best")
        lines.append(
            f"Best group: {stats['best_group']} ({mode} mean {stats.get('objective', '')})."
        )
    for key, what in (("interval_method", "Intervals"), ("tests", "Tests"), ("rule", "Verdict")):
        if stats.get(key):
            lines.append(f"{what}: {stats[key]}.")
    return lines


def _num(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"


def _interval(low, high) -> str:
    return "" if low is None or high is None else f"[{_num(low)}, {_num(high)}]"


def _table_rows(stats: dict, metric: str) -> tuple[list[dict], list[str]]:
    """The rows of one metric's table, the best group first, and their classes."""
    against = {c["group"]: c for c in stats["comparisons"] if c["metric"] == metric}
    rows = [r for r in stats["groups"] if r["metric"] == metric]
    rows.sort(key=lambda r: r["group"] != stats.get("best_group"))
    out, classes = [], []
    for r in rows:
        best = r["group"] == stats.get("best_group")
        c = against.get(r["group"])
        spread = "" if r["std"] is None else f" ± {_num(r['std'])}"
        out.append(
            {
                "group": r["group"] + (" (best)" if best else ""),
                "n": None if r["n"] is None else int(r["n"]),
                "mean ± std": f"{_num(r['mean'])}{spread}",
                "95% interval": _interval(r["ci95_low"], r["ci95_high"]) or r["note"],
                "interval method": r["ci_method"],
                "difference to the best": "" if c is None else _difference(c),
                "test": "" if c is None else _test(c),
                "verdict": "the best group" if best else _verdict(c),
            }
        )
        classes.append("best" if best else "")
    return out, classes


def _difference(c: dict) -> str:
    if c["diff"] is None:
        return ""
    interval = _interval(c["diff_ci95_low"], c["diff_ci95_high"])
    return ("+" if c["diff"] > 0 else "") + _num(c["diff"]) + (f" {interval}" if interval else "")


def _p(value) -> str:
    return f"{value:.2g}" if value is not None else ""


def _test(c: dict) -> str:
    """The test, its p-values and why it was used (the comparison's note)."""
    parts = [c["test"] or "none"]
    if c["n_pairs"]:
        parts[0] += f" on {int(c['n_pairs'])} pairs"
    if c["p"] is not None:
        parts.append(f"p={_p(c['p'])}")
    if c["p_holm"] is not None and c["p_holm"] != c["p"]:
        parts.append(f"Holm p={_p(c['p_holm'])}")
    if c["wilcoxon_p"] is not None:
        parts.append(f"Wilcoxon p={_p(c['wilcoxon_p'])}")
    text = ", ".join(parts)
    return f"{text} ({c['note']})" if c["note"] else text


def _verdict(c: dict | None) -> str:
    if c is None:
        return ""
    return c["verdict"] or c["note"]
