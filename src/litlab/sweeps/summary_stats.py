"""The statistics of a sweep summary: summary_stats.csv and summary_stats.json, and the
sections of summary.md and of the printed summary that show them.

Replicas (seeds, folds) of one configuration form a group; each group gets its mean, std and
Student's t 95% interval, and each group is compared with the best one (by the objective's mean,
in the objective's direction): the difference of means, its Welch 95% interval and p-value.
A difference whose interval contains 0 is "within noise": the replicas cannot tell the two
configurations apart. Column names are read by other tools: keep them (docs/sweeps.md).
"""

import csv
import json
import statistics
from pathlib import Path

from litlab.sweeps import stats
from litlab.sweeps.summary_render import finite

GROUP_COLUMNS = ["group", "metric", "n", "mean", "std", "ci95_low", "ci95_high"]
COMPARISON_COLUMNS = ["diff", "diff_ci95_low", "diff_ci95_high", "welch_p", "within_noise"]
CSV_COLUMNS = [*GROUP_COLUMNS, "best", *COMPARISON_COLUMNS, "note"]
ALL_JOBS = "all jobs"
RULE = "within noise: the 95% interval of the difference contains 0"
# objectives that improve downwards when neither Optuna's direction nor the monitored metric
# (whose monitor_mode is known) says how they are ranked; anything else is maximized
LOWER_IS_BETTER = ("loss", "mae", "mse", "rmse", "error", "bytes")


def objective_mode(
    direction: str | None, objective: str | None, monitor: str | None, monitor_mode: str | None
) -> str:
    """max or min: how the sweep ranks jobs and groups by their objective. An Optuna search's
    `hydra.sweeper.direction` is what the study optimized; otherwise the model's monitor_mode
    when the objective is the monitored metric (val/acc and test/acc are both acc); otherwise
    the objective's name (a loss is minimized even when the model monitors an accuracy)."""
    if direction:
        return "max" if str(direction).startswith("max") else "min"
    name = str(objective or "").rsplit("/", 1)[-1]
    if monitor_mode and (objective is None or name == str(monitor or "").rsplit("/", 1)[-1]):
        return "max" if str(monitor_mode).startswith("max") else "min"
    return "min" if any(word in name.lower() for word in LOWER_IS_BETTER) else "max"


def values_of(members: list[dict], metric: str, objective: str) -> list[float]:
    """The finite values of `metric` in these jobs; the objective falls back to the value the
    job returned to the sweeper when it is not among the logged metrics."""
    out = []
    for r in members:
        value = r["metrics"].get(metric)
        if value is None and metric == objective:
            value = r["objective"]
        if finite(value):
            out.append(float(value))
    return out


def best_group(groups: dict[str, list[dict]], objective: str, mode: str) -> str | None:
    """The group with the best mean objective (the first one on a tie)."""
    means = {
        g: statistics.fmean(v)
        for g, m in groups.items()
        if (v := values_of(m, objective, objective))
    }
    if not means:
        return None
    sign = -1 if mode == "max" else 1
    return min(means, key=lambda g: sign * means[g])


def compute(
    records: list[dict],
    groups: dict[str, list[dict]],
    metrics: list[str],
    objective: str,
    mode: str,
) -> dict:
    """What summary_stats.json holds: every group's statistics per metric ("all jobs" first),
    and every other group against the best one. Replica groups are listed only when the sweep
    has replicas (a group of two or more) and more than one configuration."""
    table = {ALL_JOBS: [r for r in records if r["status"] == "completed"]}
    replicated = len(groups) > 1 and any(len(m) >= 2 for m in groups.values())
    if replicated:
        table.update(groups)
    best = best_group(groups, objective, mode) if replicated else None
    rows, comparisons = [], []
    for name, members in table.items():
        for metric in metrics:
            if values := values_of(members, metric, objective):
                rows.append({"group": name, "metric": metric, **stats.describe(values)})
    for name, members in table.items() if best else ():
        if name in (ALL_JOBS, best):
            continue
        for metric in metrics:
            values = values_of(members, metric, objective)
            reference = values_of(groups[best], metric, objective)
            if values and reference:
                result = stats.compare(values, reference)
                comparisons.append({"group": name, "best_group": best, "metric": metric, **result})
    return {
        "objective": objective,
        "mode": mode,
        "confidence": stats.CONFIDENCE,
        "rule": RULE,
        "best_group": best,
        "groups": rows,
        "comparisons": comparisons,
    }


def write(sweep_dir: Path, summary: dict) -> None:
    """summary_stats.json as computed; summary_stats.csv with one row per group and metric:
    the group's statistics, `best` (*), and the comparison with the best group."""
    (sweep_dir / "summary_stats.json").write_text(json.dumps(summary, indent=2) + "\n")
    against = {(c["group"], c["metric"]): c for c in summary["comparisons"]}
    with open(sweep_dir / "summary_stats.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in summary["groups"]:
            c = against.get((row["group"], row["metric"]), {})
            noise = c.get("within_noise")
            writer.writerow(
                {
                    **row,
                    **{k: c.get(k) for k in COMPARISON_COLUMNS},
                    "within_noise": "" if noise is None else str(noise).lower(),
                    "best": "*" if row["group"] == summary["best_group"] else "",
                    "note": "; ".join(dict.fromkeys(n for n in (row["note"], c.get("note")) if n)),
                }
            )


def _md(text) -> str:
    return str(text).replace("|", "\\|")


def _num(value) -> str:
    return "" if value is None else f"{value:.4f}"


def _p(value) -> str:
    return "" if value is None else (f"{value:.1e}" if value < 1e-3 else f"{value:.3f}")


def _verdict(c: dict) -> str:
    if c["within_noise"] is None:
        return c["note"]
    return "within noise" if c["within_noise"] else "differs"


def _groups_table(summary: dict) -> list[str]:
    lines = ["| group | metric | n | mean ± std | 95% CI |", "|---|---|---|---|---|"]
    for r in summary["groups"]:
        best = " *" if r["group"] == summary["best_group"] else ""
        spread = "" if r["std"] is None else f" ± {r['std']:.4f}"
        interval = r["note"] or f"[{_num(r['ci95_low'])}, {_num(r['ci95_high'])}]"
        line = f"{_md(r['group'])}{best} | {r['metric']} | {r['n']} | {r['mean']:.4f}{spread} | {interval}"
        lines.append(f"| {line} |")
    return lines


def _comparisons_table(summary: dict) -> list[str]:
    lines = [
        "| group | metric | diff | 95% CI of diff | Welch p | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for c in summary["comparisons"]:
        interval = (
            ""
            if c["diff_ci95_low"] is None
            else f"[{_num(c['diff_ci95_low'])}, {_num(c['diff_ci95_high'])}]"
        )
        cells = [
            _md(c["group"]),
            c["metric"],
            f"{c['diff']:+.4f}",
            interval,
            _p(c["welch_p"]),
            _verdict(c),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def objective_line(summary: dict) -> str:
    """The plain answer for the objective: which groups the replicas cannot tell from the best."""
    objective, verdicts = summary["objective"], {}
    for c in summary["comparisons"]:
        if c["metric"] == objective:
            key = {True: "within noise of it", False: "worse beyond noise"}.get(
                c["within_noise"], "no verdict (n=1)"
            )
            verdicts.setdefault(key, []).append(_md(c["group"]))
    parts = [f"{key}: {', '.join(groups)}" for key, groups in verdicts.items()]
    return (
        f"best group by mean {objective} ({summary['mode']}): {_md(summary['best_group'])}; "
        + "; ".join(parts)
    )


def text(summary: dict, heading: str = "## ") -> str:
    """The statistics sections of summary.md (`heading` "## ") and of the printed summary ("")."""
    if not summary["groups"]:
        return f"{heading}mean ± std over jobs\n\n(no completed jobs)"
    out = [
        f"{heading}mean ± std over jobs and 95% interval of the mean (Student's t)",
        "",
        *_groups_table(summary),
    ]
    if summary["comparisons"]:
        out += [
            "",
            f"{heading}each group against the best (*): difference of means, its 95% interval "
            + "(Welch) and Welch's p-value",
            "",
            *_comparisons_table(summary),
            "",
            objective_line(summary),
            f"({RULE})",
        ]
    return "\n".join(out)
