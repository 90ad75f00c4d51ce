"""Statistics of replicas (seeds, folds) for the sweep summary: pure functions of floats.

A mean over a few seeds or folds means little without its spread, and two configurations are
only "different" when their gap is larger than the replica-to-replica noise. So every group
gets an interval of its mean, and every comparison the test that fits the design:

- **paired t** on the per-replica differences when the two groups ran the same replicas (the
  same folds, the same seeds): fold 3 is hard for every configuration, and pairing removes that
  shared part of the noise; the Wilcoxon signed-rank test goes alongside from 6 pairs (with
  fewer, its smallest two-sided p-value, 2/2^n, is above 0.05: it could never say "differs");
- **Welch's t** when the replicas cannot be matched (fewer than 2 shared, or one repeats).

A group's interval is Student's t interval of the mean, cut to the metric's range (an
accuracy in [0, 1], a loss >= 0, r2 <= 1): the mean of values in a range lies in that range,
so the cut part holds no possible mean and the coverage stays what t gives. `ci_method` says
whether a row was cut. Undefined parts are None with a `note`, never NaN and never a warning.

scipy is imported inside the functions: the summary callback is built for every Hydra run,
including `--help`, and must stay light until it writes a summary.
"""

import math
import statistics

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
    inside them, also for a mean a float32 rounding put just past a bound)."""
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
        return {
            "n": 1,
            "mean": mean,
            "std": None,
            "ci95_low": None,
            "ci95_high": None,
            "ci_method": None,
            "note": NO_INTERVAL,
        }
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
    return {
        "test": test,
        "n_pairs": None,
        "diff": diff,
        "diff_ci95_low": None,
        "diff_ci95_high": None,
        "dof": None,
        "p": None,
        "wilcoxon_p": None,
        "note": note,
    }


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
        note = ""
        if left:
            note = f"paired on the {len(shared)} replicas both groups have; left out: " + ", ".join(
                left
            )
        return paired([mine[r] for r in shared], [theirs[r] for r in shared], note)
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
