"""Statistics of replicas (seeds, folds) for the sweep summary: pure functions of lists of
floats. A mean over a few seeds means little without its spread, and two configurations are
only "different" when their gap is larger than the seed-to-seed noise, so every group gets a
Student's t interval and every comparison a Welch interval and p-value.

scipy is imported inside the functions: the summary callback is built for every Hydra run,
including `--help`, and must stay light until it writes a summary.
"""

import math
import statistics

CONFIDENCE = 0.95
NO_INTERVAL = "n=1: no interval"
NO_VARIANCE = "zero variance in both groups: no p-value"


def describe(values: list[float]) -> dict:
    """n, mean, sample std (ddof=1) and the Student's t 95% interval of the mean.

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
            "note": NO_INTERVAL,
        }
    std = 0.0 if min(values) == max(values) else statistics.stdev(values)
    half = _t_quantile(n - 1) * std / math.sqrt(n)
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "ci95_low": mean - half,
        "ci95_high": mean + half,
        "note": "",
    }


def welch_dof(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Welch–Satterthwaite degrees of freedom of the difference of two means (variances > 0
    in at least one group; a group with zero variance adds nothing to either sum)."""
    se_a, se_b = var_a / n_a, var_b / n_b
    return (se_a + se_b) ** 2 / (se_a**2 / (n_a - 1) + se_b**2 / (n_b - 1))


def compare(values: list[float], reference: list[float]) -> dict:
    """mean(values) - mean(reference), its 95% interval (Welch–Satterthwaite dof) and Welch's
    two-sided p-value; `within_noise` is True when the interval contains 0.

    Undefined parts are None with a `note`, never NaN and never a warning: a group of one has
    no interval and no p-value; two groups without variance have an exact difference (the
    interval is that point) and no p-value."""
    a, b = describe(values), describe(reference)
    diff = a["mean"] - b["mean"]
    out = {
        "diff": diff,
        "diff_ci95_low": None,
        "diff_ci95_high": None,
        "welch_p": None,
        "dof": None,
        "within_noise": None,
        "note": "",
    }
    if a["n"] < 2 or b["n"] < 2:
        return out | {"note": NO_INTERVAL}
    var_a, var_b = a["std"] ** 2, b["std"] ** 2
    if var_a == 0 and var_b == 0:
        return out | {
            "diff_ci95_low": diff,
            "diff_ci95_high": diff,
            "within_noise": diff == 0,
            "note": NO_VARIANCE,
        }
    from scipy import stats

    dof = welch_dof(var_a, a["n"], var_b, b["n"])
    half = _t_quantile(dof) * math.sqrt(var_a / a["n"] + var_b / b["n"])
    # from the groups' mean/std: the same test as ttest_ind(equal_var=False) on the values,
    # without its precision warning on near-identical replicas
    test = stats.ttest_ind_from_stats(
        a["mean"], a["std"], a["n"], b["mean"], b["std"], b["n"], equal_var=False
    )
    low, high = diff - half, diff + half
    return out | {
        "diff_ci95_low": low,
        "diff_ci95_high": high,
        "welch_p": float(test.pvalue),
        "dof": dof,
        "within_noise": low <= 0 <= high,
    }


def _t_quantile(dof: float) -> float:
    """The two-sided 95% quantile of Student's t with `dof` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof))
