"""The group comparison of a sweep's report, read from the summary's statistics
(`summary_stats.json`, else `summary_stats.csv`; litlab.sweeps.summary_stats writes both).

Those files are data: each row is kept only with the shape the summary writes (a group name,
a metric, a finite mean), every number is read by `files.number` and every text is escaped
by the page. A sweep without replicas has no statistics: the section is left out."""

from pathlib import Path

from litlab.report import figures, files
from litlab.report.page import Page

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
        out = {
            k: data[k] for k in ("best_group", "objective", "mode") if isinstance(data.get(k), str)
        }
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


def add(page: Page, sweep: Path, stats: dict | None, objective: str) -> None:
    """The section: what the comparison rests on, a table per metric (the objective first),
    the plot of the objective's group means with their replicas."""
    if stats is None:
        page.add(
            "Group comparison",
            page.missing(
                "No group comparison: summary_stats.json and summary_stats.csv are absent or "
                "unreadable (the sweep's summary writes them when jobs complete)"
            ),
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
