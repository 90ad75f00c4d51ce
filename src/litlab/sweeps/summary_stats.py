"""The statistics of a sweep summary (summary_stats.csv and .json, the sections of summary.md
and of the printed summary that show them) and its plot (summary.png); what each column means
and when each test is used: docs/sweeps.md.

Replicas (seeds, folds) of one configuration form a group. A mean over a few replicas means
little without its spread, so each group gets its mean, std and 95% interval
(`describe_values`); two configurations only differ when their gap is larger than the
replica-to-replica noise, so each group is compared with the best one by the test that fits
the design (`compare`: paired where both ran the same replicas, since pairing removes the noise
they share; Welch otherwise), Holm-adjusted metric by metric (`holm`). Pooling jobs of
different configurations means nothing, so there is no "all jobs" row unless the sweep is one
configuration. Undefined parts are None with a `note`, never NaN and never a warning.

scipy and matplotlib are imported inside the functions: the summary callback is built for
every Hydra run, including `--help`, and must stay light until it writes a summary."""

import csv
import json
import math
import statistics
import textwrap
from pathlib import Path

from litlab.report.files import common_overrides, replica_offsets

# ----------------------------------------------------------------- stats
CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
# how far past a bound a value still counts as inside it: metrics computed in float32 (an F1
# of 1.0000001192092896 from torchmetrics) land a rounding step outside their range
ROUNDING = 1e-6
MIN_WILCOXON = 6  # pairs: below this the signed-rank test cannot reach p < 0.05
NO_INTERVAL = "n=1: no interval"
NO_VARIANCE = "zero variance in both groups: no p-value"
EQUAL_DIFFERENCES = "every paired difference is the same: no p-value"
T_METHOD = "Student t"
PAIRED, WELCH = "paired t", "Welch t"
INTERVAL_METHOD = (
    "Student's t interval of the mean (n-1 degrees of freedom), cut to the metric's range "
    "where it crosses a bound (acc, f1, dice, auroc, iou, precision, recall in [0, 1]; "
    "r2 <= 1; loss, mae, mse, rmse, hd95 >= 0)"
)

# the range of a metric, by the last part of its name (val/acc -> acc; dice_1 -> dice)
UNIT_INTERVAL = (
    *("acc", "accuracy", "f1", "dice", "auroc", "auc", "iou", "jaccard", "precision", "recall"),
    *("specificity", "sensitivity", "ap", "auprc"),
)
NON_NEGATIVE = ("loss", "mae", "mse", "rmse", "hd95", "hd", "bytes")


def metric_range(metric: str) -> tuple[float | None, float | None]:
    """(low, high) that every value of `metric` lies in; None where unbounded."""
    name = str(metric).rsplit("/", 1)[-1].lower()
    stem = name.split("_", 1)[0]
    if stem in UNIT_INTERVAL:
        return 0.0, 1.0
    if stem == "r2":
        return None, 1.0
    if stem in NON_NEGATIVE or "loss" in name:
        return 0.0, None
    return None, None


def _range_text(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"[{low:g}, {high:g}]"
    return f">= {low:g}" if low is not None else f"<= {high:g}"


def cut(low: float, high: float, bounds: tuple[float | None, float | None]):
    """(low, high, ci_method): the interval cut to `bounds`, and the method's name (both ends
    inside them, also for a mean a float32 rounding put just past a bound). The mean of values
    in a range lies in it: the cut part holds no possible mean, so the coverage stays t's."""
    floor, ceiling = bounds
    new_low, new_high = low, high
    if floor is not None:
        new_low, new_high = max(new_low, floor), max(new_high, floor)
    if ceiling is not None:
        new_low, new_high = min(new_low, ceiling), min(new_high, ceiling)
    if (new_low, new_high) == (low, high):
        return low, high, T_METHOD
    return new_low, new_high, f"{T_METHOD}, cut to {_range_text(floor, ceiling)}"


def describe_values(values: list[float], bounds=(None, None)) -> dict:
    """n, mean, sample std (ddof=1) and the 95% interval of the mean (Student's t, cut to
    `bounds`, the metric's range).

    With one value the spread is unknown: std and the interval are None (never NaN), and
    `note` says so. Equal values give std 0 and the interval [mean, mean]."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("describe() needs at least one value")
    n, mean = len(values), statistics.fmean(values)
    if n < 2:
        spread = dict.fromkeys(("std", "ci95_low", "ci95_high", "ci_method"))
        return {"n": 1, "mean": mean, **spread, "note": NO_INTERVAL}
    std = 0.0 if min(values) == max(values) else statistics.stdev(values)
    half = _t_quantile(n - 1) * std / math.sqrt(n)
    floor, ceiling = bounds
    if (floor is not None and min(values) < floor - ROUNDING) or (
        ceiling is not None and max(values) > ceiling + ROUNDING
    ):
        bounds = (None, None)  # not the range its name says (a percentage?): nothing to cut
    low, high, method = cut(mean - half, mean + half, bounds)
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "ci95_low": low,
        "ci95_high": high,
        "ci_method": method,
        "note": "",
    }


def welch_dof(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Welch–Satterthwaite degrees of freedom of the difference of two means (variances > 0
    in at least one group; a group with zero variance adds nothing to either sum)."""
    se_a, se_b = var_a / n_a, var_b / n_b
    return (se_a + se_b) ** 2 / (se_a**2 / (n_a - 1) + se_b**2 / (n_b - 1))


def _empty(diff: float, test: str | None, note: str) -> dict:
    keys = ("test", "n_pairs", "diff", "diff_ci95_low", "diff_ci95_high", "dof", "p", "wilcoxon_p")
    return dict.fromkeys(keys) | {"test": test, "diff": diff, "note": note}


def welch(values: list[float], reference: list[float], note: str = "") -> dict:
    """mean(values) - mean(reference), its 95% interval (Welch–Satterthwaite dof) and Welch's
    two-sided p-value. A group of one has no interval and no p-value; two groups without
    variance have an exact difference (the interval is that point) and no p-value."""
    a, b = describe_values(values), describe_values(reference)
    diff = a["mean"] - b["mean"]
    if a["n"] < 2 or b["n"] < 2:
        return _empty(diff, None, NO_INTERVAL)
    out = _empty(diff, WELCH, note)
    var_a, var_b = a["std"] ** 2, b["std"] ** 2
    if var_a == 0 and var_b == 0:
        joined = "; ".join(n for n in (note, NO_VARIANCE) if n)
        return out | {"diff_ci95_low": diff, "diff_ci95_high": diff, "note": joined}
    from scipy import stats

    dof = welch_dof(var_a, a["n"], var_b, b["n"])
    half = _t_quantile(dof) * math.sqrt(var_a / a["n"] + var_b / b["n"])
    # from the groups' mean/std: the same test as ttest_ind(equal_var=False) on the values,
    # without its precision warning on near-identical replicas
    test = stats.ttest_ind_from_stats(
        a["mean"], a["std"], a["n"], b["mean"], b["std"], b["n"], equal_var=False
    )
    return out | {
        "diff_ci95_low": diff - half,
        "diff_ci95_high": diff + half,
        "dof": dof,
        "p": float(test.pvalue),
    }


def paired(values: list[float], reference: list[float], note: str = "") -> dict:
    """The paired t test on the differences values[i] - reference[i] (2 pairs or more): their
    mean, its 95% interval (n-1 dof) and the two-sided p-value, as scipy's `ttest_rel`; from 6
    pairs also Wilcoxon's signed-rank p-value on the same differences."""
    from scipy import stats

    diffs = [float(a) - float(b) for a, b in zip(values, reference, strict=True)]
    n, diff = len(diffs), statistics.fmean(diffs)
    out = _empty(diff, PAIRED, note) | {"n_pairs": n, "dof": n - 1}
    if min(diffs) == max(diffs):
        joined = "; ".join(n for n in (note, EQUAL_DIFFERENCES) if n)
        return out | {"diff_ci95_low": diff, "diff_ci95_high": diff, "note": joined}
    se = statistics.stdev(diffs) / math.sqrt(n)
    half = _t_quantile(n - 1) * se
    p = 2 * float(stats.t.sf(abs(diff) / se, n - 1))
    wilcoxon_p = None
    rounded = [round(d, 12) for d in diffs]  # roundoff must not break ties (scipy's advice)
    if n >= MIN_WILCOXON and any(rounded):
        wilcoxon_p = float(stats.wilcoxon(rounded).pvalue)
    return out | {
        "diff_ci95_low": diff - half,
        "diff_ci95_high": diff + half,
        "p": min(p, 1.0),
        "wilcoxon_p": wilcoxon_p,
    }


def compare(values: list[tuple[str, float]], reference: list[tuple[str, float]]) -> dict:
    """A group's (replica, value) pairs against the reference group's: paired t on the
    replicas both have when they share at least 2 (the replicas of each group all different),
    else Welch on all values. `note` says which replicas a partly paired test left out, or
    why Welch was used."""
    ids, ref_ids = [r for r, _ in values], [r for r, _ in reference]
    unique = all(ids) and all(ref_ids)
    unique = unique and len(set(ids)) == len(ids) and len(set(ref_ids)) == len(ref_ids)
    shared = [r for r in ids if r in set(ref_ids)] if unique else []
    if len(shared) >= 2:
        mine, theirs = dict(values), dict(reference)
        left = [r for r in ids if r not in shared] + [r for r in ref_ids if r not in shared]
        note = f"paired on the {len(shared)} replicas both groups have; left out: " if left else ""
        return paired(
            [mine[r] for r in shared], [theirs[r] for r in shared], note + ", ".join(left)
        )
    if not unique:
        why = "Welch: a replica (seed, fold) repeats or is unnamed, so pairs cannot be matched"
    elif shared:
        why = f"Welch: the groups share 1 replica ({shared[0]}); a paired test needs 2"
    else:
        why = "Welch: the groups share no replica (seed, fold)"
    return welch([v for _, v in values], [v for _, v in reference], why)


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of the p-values of one family of tests (None: no test,
    left out of the family). The i-th smallest of m is multiplied by m - i (i from 0), made
    non-decreasing in that order and capped at 1; "adjusted p < alpha" then keeps the chance
    of any false "differs" in the family below alpha."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    out: list[float | None] = [None] * len(pvalues)
    running, m = 0.0, len(order)
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def _t_quantile(dof: float) -> float:
    """The two-sided 95% quantile of Student's t with `dof` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof))


# ------------------------------------------------------------
GROUP_COLUMNS = ["group", "metric", "n", "mean", "std", "ci95_low", "ci95_high", "ci_method"]
COMPARISON_COLUMNS = [
    *("test", "n_pairs", "diff", "diff_ci95_low", "diff_ci95_high"),
    *("p", "p_holm", "wilcoxon_p", "within_noise", "verdict"),
]
CSV_COLUMNS = [*GROUP_COLUMNS, "best", *COMPARISON_COLUMNS, "note"]
ALL_JOBS = "all jobs"
TESTS = (
    "paired t on the per-replica differences when both groups ran the same replicas (at least "
    f"2 shared seeds or folds), with Wilcoxon's signed-rank test alongside from "
    f"{MIN_WILCOXON} pairs; Welch's t otherwise; p-values Holm-adjusted over the groups "
    "compared with the best, metric by metric"
)
RULE = "differs: the Holm-adjusted p-value is below 0.05; within noise otherwise"
NO_REPLICAS = (
    "no replicas: each configuration ran once, so there is no spread to compare them by "
    "(add seed=0,1,2 or data.num_folds=5 'data.fold=range(5)' to the sweep)"
)
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


def replicas_of(members: list[dict], metric: str, objective: str) -> list[dict]:
    """{replica, job, value} of each job with a finite `metric`; the objective falls back to
    the value the job returned to the sweeper when it is not among the logged metrics."""
    out = []
    for r in members:
        value = r["metrics"].get(metric)
        if value is None and metric == objective:
            value = r["objective"]
        if finite(value):
            out.append({"replica": r.get("replica", ""), "job": r["job"], "value": float(value)})
    return out


def best_group(groups: dict[str, list[dict]], objective: str, mode: str) -> str | None:
    """The group with the best mean objective (the first one on a tie)."""
    means = {
        g: statistics.fmean(v)
        for g, m in groups.items()
        if (v := [r["value"] for r in replicas_of(m, objective, objective)])
    }
    if not means:
        return None
    sign = -1 if mode == "max" else 1
    return min(means, key=lambda g: sign * means[g])


def _table(records: list[dict], groups: dict[str, list[dict]]) -> tuple[dict, str]:
    """(the groups to describe, what the sweep is): one configuration is one group ("all
    jobs"); several with replicas are compared; several without replicas have nothing to
    compare (no rows)."""
    if len(groups) <= 1:
        done = [r for members in groups.values() for r in members]
        return ({ALL_JOBS: done} if done else {}), "one configuration"
    if any(len(m) >= 2 for m in groups.values()):
        return groups, "groups"
    return {}, NO_REPLICAS


def compute(
    records: list[dict],
    groups: dict[str, list[dict]],
    metrics: list[str],
    objective: str,
    mode: str,
) -> dict:
    """What summary_stats.json holds: every group's statistics per metric (with its replicas)
    and every other group against the best one."""
    table, kind = _table(records, groups)
    best = best_group(groups, objective, mode) if kind == "groups" else None
    rows = []
    for name, members in table.items():
        for metric in metrics:
            if found := replicas_of(members, metric, objective):
                described = describe_values([r["value"] for r in found], metric_range(metric))
                rows.append({"group": name, "metric": metric, **described, "replicas": found})
    comparisons = []
    for metric in metrics if best else ():
        reference = _pairs(groups[best], metric, objective)
        family = [
            {"group": name, "best_group": best, "metric": metric, **compare(values, reference)}
            for name, members in groups.items()
            if name != best and reference and (values := _pairs(members, metric, objective))
        ]
        _judge(family, mode if metric == objective else None)
        comparisons += family
    return {
        "objective": objective,
        "mode": mode,
        "confidence": CONFIDENCE,
        "interval_method": INTERVAL_METHOD,
        "tests": TESTS,
        "rule": RULE,
        "sweep": kind,
        "best_group": best,
        "groups": rows,
        "comparisons": comparisons,
    }


def _pairs(members: list[dict], metric: str, objective: str) -> list[tuple[str, float]]:
    return [(r["replica"], r["value"]) for r in replicas_of(members, metric, objective)]


def _judge(family: list[dict], mode: str | None) -> None:
    """Holm-adjusted p, `within_noise` and the verdict in words of each comparison of one
    metric (`mode`: the objective's direction, None for another metric)."""
    for c, adjusted in zip(family, holm([c["p"] for c in family]), strict=True):
        c["p_holm"] = adjusted
        if c["diff_ci95_low"] is None:
            c["within_noise"], c["verdict"] = None, "no verdict (n=1)"
            continue
        differs = adjusted < ALPHA if adjusted is not None else c["diff"] != 0
        c["within_noise"] = not differs
        if not differs:
            c["verdict"] = "within noise of the best"
        elif mode is None:
            c["verdict"] = ("higher" if c["diff"] > 0 else "lower") + " than the best, beyond noise"
        else:
            better = (c["diff"] > 0) == (mode == "max")
            c["verdict"] = ("better" if better else "worse") + " than the best, beyond noise"


def write_stats(sweep_dir: Path, summary: dict) -> None:
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


def p_text(value) -> str:
    return "" if value is None else (f"{value:.1e}" if value < 1e-3 else f"{value:.3f}")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a markdown table (cells escaped by the caller)."""
    return [_md_row(header), "|" + "---|" * len(header), *map(_md_row, rows)]


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _groups_table(summary: dict) -> list[str]:
    rows = []
    for r in summary["groups"]:
        best = " *" if r["group"] == summary["best_group"] else ""
        spread = "" if r["std"] is None else f" ± {r['std']:.4f}"
        interval = r["note"] or f"[{_num(r['ci95_low'])}, {_num(r['ci95_high'])}]"
        cells = [
            f"{_md(r['group'])}{best}",
            r["metric"],
            str(r["n"]),
            f"{r['mean']:.4f}{spread}",
            interval,
            r["ci_method"] or "",
        ]
        rows.append(cells)
    header = ["group", "metric", "n", "mean ± std", "95% CI", "interval"]
    return _md_table(header, rows)


def _comparisons_table(summary: dict) -> list[str]:
    rows = []
    for c in summary["comparisons"]:
        interval = (
            ""
            if c["diff_ci95_low"] is None
            else f"[{_num(c['diff_ci95_low'])}, {_num(c['diff_ci95_high'])}]"
        )
        pairs = f" ({c['n_pairs']} pairs)" if c["n_pairs"] else ""
        cells = [
            _md(c["group"]),
            c["metric"],
            (c["test"] or "") + pairs,
            f"{c['diff']:+.4f}",
            interval,
            p_text(c["p"]),
            p_text(c["p_holm"]),
            p_text(c["wilcoxon_p"]),
            c["verdict"],
            _md(c["note"]),
        ]
        rows.append(cells)
    header = ["group", "metric", "test", "diff", "95% CI of diff", "p", "Holm p", "Wilcoxon p"]
    return _md_table([*header, "verdict", "note"], rows)


def objective_line(summary: dict) -> str:
    """The plain answer for the objective: which groups the replicas cannot tell from the best."""
    objective, verdicts = summary["objective"], {}
    for c in summary["comparisons"]:
        if c["metric"] == objective:
            verdicts.setdefault(c["verdict"], []).append(_md(c["group"]))
    parts = [f"{key}: {', '.join(groups)}" for key, groups in verdicts.items()]
    return (
        f"best group by mean {objective} ({summary['mode']}): {_md(summary['best_group'])}; "
        + "; ".join(parts)
    )


def text(summary: dict, heading: str = "## ") -> str:
    """The statistics sections of summary.md (`heading` "## ") and of the printed summary ("")."""
    if not summary["groups"]:
        why = NO_REPLICAS if summary.get("sweep") == NO_REPLICAS else "(no completed jobs)"
        return f"{heading}mean ± std over replicas\n\n{why}"
    out = [
        (
            f"{heading}mean ± std over replicas and 95% interval of the mean "
            "(Student's t, cut to the metric's range)"
        ),
        "",
        *_groups_table(summary),
    ]
    if summary["comparisons"]:
        out += [
            "",
            (
                f"{heading}each group against the best (*): difference of means (group - best), "
                "its 95% interval and p-value by the test named, Holm-adjusted over the groups"
            ),
            "",
            *_comparisons_table(summary),
            "",
            objective_line(summary),
            f"({RULE})",
        ]
    return "\n".join(out)


# -------------------------------------------------------------- replicas
def _replica_key(override: str, replica_keys) -> bool:
    return override.split("=", 1)[0].lstrip("+~").rsplit(".", 1)[-1] in replica_keys


def replica_groups(records: list[dict], replica_keys) -> dict[str, list[dict]]:
    """Completed jobs grouped by their overrides without the replica keys (seed, fold); each
    job a copy with its `replica`: its replica overrides (`data.fold=3`), which match the jobs
    of different groups that ran the same fold or seed."""
    groups: dict[str, list[dict]] = {}
    common = common_overrides(records)
    for r in records:
        if r["status"] != "completed":
            continue
        rest = [o for o in r["overrides"] if o not in common and not _replica_key(o, replica_keys)]
        replica = " ".join(sorted(o for o in r["overrides"] if _replica_key(o, replica_keys)))
        groups.setdefault(" ".join(rest) or "(no other overrides)", []).append(
            {**r, "replica": replica}
        )
    return groups


def marked_best(records: list[dict], groups: dict[str, list[dict]], best_group, best: int | None):
    """The indices of the jobs marked best: the best group's jobs when the sweep compares
    groups (one job of it is one fold or seed, not the best configuration), else the job
    numbered `best`."""
    dirs = {r["run_dir"] for r in groups[best_group]} if best_group is not None else set()
    return {
        i
        for i, r in enumerate(records)
        if r["status"] == "completed" and (r["run_dir"] in dirs if dirs else r["job"] == best)
    }


# -------------------------------------------------------- summary render
def finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value).replace("|", "\\|")


def markdown(rows: list[dict], columns: list[str]) -> str:
    names = ["overrides" if c == "varying" else c for c in columns]
    return "\n".join(_md_table(names, [[_cell(row[c]) for c in columns] for row in rows]))


def plot_summary(records: list[dict], best: set[int], stats: dict, path: Path) -> None:
    """The groups' mean objective with their intervals and replicas when the sweep compares
    groups, else the objective of each job."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in stats["groups"] if r["metric"] == stats["objective"]]
    if stats["best_group"] and rows:
        fig = _groups_figure(plt, rows, stats)
    else:
        fig = _jobs_figure(plt, records, best, stats["objective"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _groups_figure(plt, rows: list[dict], stats: dict):
    """Each group's mean (gold: the best group) with its 95% interval as an error bar, each
    seed or fold a grey point beside it, and a faint line joining a replica across groups."""
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(rows) + 2), 4.0))
    offsets = replica_offsets(rows)
    joined: dict[str, list[tuple[float, float]]] = {}
    for x, row in enumerate(rows):
        for r in row["replicas"]:
            point = (x + offsets[str(r["replica"])], r["value"])
            ax.plot(*point, "o", color="tab:gray", markersize=4, alpha=0.8)
            joined.setdefault(str(r["replica"]), []).append(point)
        best = row["group"] == stats["best_group"]
        error = None
        if row["ci95_low"] is not None:
            error = [[row["mean"] - row["ci95_low"]], [row["ci95_high"] - row["mean"]]]
        ax.errorbar(
            x,
            row["mean"],
            yerr=error,
            fmt="D",
            color="goldenrod" if best else "tab:blue",
            markersize=8,
            capsize=6,
            linewidth=2,
        )
    for name, points in joined.items():
        if name and len(points) > 1:
            ax.plot(*zip(*points), "-", color="tab:gray", linewidth=0.6, alpha=0.4)
    # a long group name on lines of 28 characters, broken between overrides only
    wrap = textwrap.TextWrapper(28, break_long_words=False, break_on_hyphens=False).fill
    labels = [f"{wrap(str(r['group']))}\n(n={r['n']})" for r in rows]
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel(stats["objective"])
    ax.set_title(
        f"mean {stats['objective']} per group with its 95% interval (gold: best group)\n"
        "grey: each seed or fold, joined across groups",
        fontsize=9,
    )
    return fig


def _jobs_figure(plt, records: list[dict], best: set[int], objective: str):
    """One bar per job (failed jobs are red crosses at the bottom); the best job is gold."""
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * len(records) + 2), 3.5))
    for i, r in enumerate(records):
        if r["status"] == "completed" and finite(r["objective"]):
            ax.bar(i, r["objective"], color="gold" if i in best else "tab:blue")
        else:
            ax.plot(i, 0, "x", color="tab:red", markersize=10)
    ax.set_xticks(range(len(records)), [str(r["job"]) for r in records])
    ax.set_xlabel("job (x: failed, pruned or incomplete)")
    ax.set_ylabel(objective)
    ax.set_title("objective per job")
    return fig
