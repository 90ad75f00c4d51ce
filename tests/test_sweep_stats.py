"""Differences with confidence in the sweep summary: each replica group's mean, std and
interval (Student's t, cut to the metric's range), each group against the best one by the test
that fits the design (paired t on shared seeds/folds with Wilcoxon alongside, else Welch),
Holm's correction over the groups, and the verdict in words; checked against hand-computed
values, R's textbook examples and scipy, then through `write_summary` on synthetic job records
(no training). The real k-fold sweep: tests/test_folds.py (slow)."""

import csv
import json
import math
import warnings

import pytest
from scipy import stats as scipy_stats

from litlab.sweeps import summary_stats
from litlab.sweeps import summary_stats as stats
from litlab.sweeps.summary import write_summary

# R's `sleep` data (Student, 1908): extra hours of sleep of the same 10 patients under two
# drugs. R's `t.test(extra ~ group, data = sleep)` (Welch): t = -1.8608, df = 17.776, p-value =
# 0.07939, 95 percent CI -3.3654832 0.2054832; the same with `paired = TRUE`: t = -4.0621,
# df = 9, p-value = 0.002833, 95 percent CI -2.4598858 -0.7001142
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def named(values, key="data.fold"):
    """(replica, value) pairs: the i-th value is replica `key=i`."""
    return [(f"{key}={i}", v) for i, v in enumerate(values)]


def test_describe_gives_the_student_t_interval_of_the_mean():
    # by hand: mean 2, sd 1, t(0.975, 2) = 4.302653 -> 2 ± 4.302653 / sqrt(3)
    one_two_three = stats.describe_values([1, 2, 3])
    assert one_two_three["n"] == 3 and one_two_three["mean"] == 2 and one_two_three["std"] == 1
    assert one_two_three["ci95_low"] == pytest.approx(-0.484138, abs=1e-6)
    assert one_two_three["ci95_high"] == pytest.approx(4.484138, abs=1e-6)
    assert one_two_three["ci_method"] == "Student t"  # no bounds: nothing cut
    # R: t.test(sleep$extra[1:10]) -> 95 percent confidence interval -0.5297804 2.0297804
    sleep = stats.describe_values(SLEEP_1)
    assert (sleep["ci95_low"], sleep["ci95_high"]) == pytest.approx((-0.5297804, 2.0297804))
    low, high = scipy_stats.t.interval(0.95, 9, loc=0.75, scale=scipy_stats.sem(SLEEP_1))
    assert (sleep["ci95_low"], sleep["ci95_high"]) == pytest.approx((low, high))


@pytest.mark.parametrize(
    "metric, expected",
    [
        ("val/acc", (0, 1)),
        ("test/f1", (0, 1)),
        ("val/dice", (0, 1)),
        ("test/dice_1", (0, 1)),
        ("test/auroc", (0, 1)),
        ("val/r2", (None, 1)),
        ("val/loss", (0, None)),
        ("train/loss_ce", (0, None)),
        ("test/mae", (0, None)),
        ("test/rmse", (0, None)),
        ("test/hd95", (0, None)),
        ("federate/bytes_per_round", (0, None)),
        ("val/score", (None, None)),
        ("val/accumulated", (None, None)),  # "acc" is the whole first word, not a prefix
    ],
)
def test_the_range_of_a_metric_comes_from_its_name(metric, expected):
    assert stats.metric_range(metric) == expected


T = {n: scipy_stats.t.ppf(0.975, n - 1) for n in (2, 3, 4)}


@pytest.mark.parametrize(
    "metric, values, expected, method",
    [
        # `-m seed=1,2,3,4`: Student's t alone gives [0.9713, 1.0044]; an accuracy is <= 1
        ("val/acc", [0.9722, 1.0, 0.9861, 1.0], (0.9896 - T[4] * 0.01339 / 2, 1.0), "[0, 1]"),
        # n = 2: t with 1 degree of freedom spans more than the whole range: the range
        ("val/acc", [0.5, 0.95], (0.0, 1.0), "[0, 1]"),
        # 3 jobs, far apart ([-0.55, 1.86] before)
        ("test/acc", [0.1, 0.9, 0.95], (0.0, 1.0), "[0, 1]"),
        ("val/loss", [0.01, 0.3, 0.02], (0.0, 0.11 + T[3] * 0.16462 / 3**0.5), ">= 0"),
        ("val/r2", [0.99, 0.5, 0.98], (0.8233 - T[3] * 0.2801 / 3**0.5, 1.0), "<= 1"),
    ],
)
def test_intervals_of_bounded_metrics_are_cut_to_their_range(metric, values, expected, method):
    """Student's t interval of the mean where it lies inside the metric's range, the bound
    where it crosses it; the row names the method and the range it was cut to."""
    row = stats.describe_values(values, stats.metric_range(metric))
    assert (row["ci95_low"], row["ci95_high"]) == pytest.approx(expected, abs=2e-4)
    assert row["ci_method"] == f"Student t, cut to {method}"
    low, high = stats.metric_range(metric)
    assert low is None or row["ci95_low"] >= low
    assert high is None or row["ci95_high"] <= high
    assert row["ci95_low"] <= row["mean"] <= row["ci95_high"]


@pytest.mark.parametrize(
    "values, expected",
    [
        ([1.0, 1.0, 1.0], (1.0, 1.0)),  # every job at the bound: the point, nothing to cut
        ([0.9, 0.9], (0.9, 0.9)),  # n = 2, all equal
        ([0.0, 0.0, 0.0, 0.0], (0.0, 0.0)),
    ],
)
def test_equal_values_at_or_inside_a_bound_give_the_point(values, expected):
    row = stats.describe_values(values, (0.0, 1.0))
    assert (row["ci95_low"], row["ci95_high"]) == expected and row["std"] == 0
    assert row["ci_method"] == "Student t" and row["note"] == ""


def test_a_float32_rounding_past_a_bound_still_counts_as_inside_it():
    """torchmetrics' F1 of a perfect fold in float32: 1.0000001192092896. The interval is still
    cut to [0, 1] (real values of a 5-fold digits sweep), and a mean past 1 by a rounding step
    gets the point 1."""
    f1 = [0.9859185814857483, 0.9720374941825867, 1.0000001192092896, 0.9930706024169922]
    row = stats.describe_values([*f1, 1.0000001192092896], (0.0, 1.0))
    assert row["ci95_high"] == 1.0 and row["ci_method"] == "Student t, cut to [0, 1]"
    perfect = stats.describe_values([1.0000001192092896] * 3, (0.0, 1.0))
    assert (perfect["ci95_low"], perfect["ci95_high"]) == (1.0, 1.0)


def test_one_value_has_no_interval_and_values_outside_the_range_are_not_cut():
    single = stats.describe_values([1.0], (0.0, 1.0))
    assert single["ci95_low"] is single["ci95_high"] is single["ci_method"] is None
    assert single["note"] == "n=1: no interval"
    # an "acc" logged in percent is not in [0, 1]: the name's range does not apply to it
    percent = stats.describe_values([85.0, 95.0, 90.0], stats.metric_range("val/acc"))
    assert percent["ci_method"] == "Student t" and percent["ci95_high"] > 95


def test_welch_reproduces_the_textbook_welch_test():
    diff = stats.welch(SLEEP_1, SLEEP_2)
    assert diff["test"] == "Welch t" and diff["diff"] == pytest.approx(0.75 - 2.33)
    assert diff["dof"] == pytest.approx(17.776, abs=1e-3)
    assert diff["p"] == pytest.approx(0.07939, abs=1e-5)
    assert (diff["diff_ci95_low"], diff["diff_ci95_high"]) == pytest.approx((-3.3654832, 0.2054832))


def test_paired_data_get_the_paired_test_which_is_much_tighter_here():
    """The sleep data are paired (the same patients): R's paired t, and scipy's ttest_rel and
    wilcoxon on the differences; the paired interval excludes 0 where Welch's does not."""
    paired = stats.compare(named(SLEEP_1, "patient"), named(SLEEP_2, "patient"))
    assert paired["test"] == "paired t" and paired["n_pairs"] == 10 and paired["dof"] == 9
    assert paired["diff"] == pytest.approx(-1.58) and paired["note"] == ""
    assert paired["p"] == pytest.approx(0.002833, abs=1e-6)
    interval = (paired["diff_ci95_low"], paired["diff_ci95_high"])
    assert interval == pytest.approx((-2.4598858, -0.7001142))
    theirs = scipy_stats.ttest_rel(SLEEP_1, SLEEP_2)
    assert paired["p"] == pytest.approx(theirs.pvalue)
    assert interval == pytest.approx(tuple(theirs.confidence_interval(0.95)))
    differences = [round(a - b, 12) for a, b in zip(SLEEP_1, SLEEP_2)]
    assert paired["wilcoxon_p"] == pytest.approx(scipy_stats.wilcoxon(differences).pvalue)
    welch = stats.welch(SLEEP_1, SLEEP_2)
    assert interval[1] - interval[0] < 0.5 * (welch["diff_ci95_high"] - welch["diff_ci95_low"])


def test_wilcoxon_goes_alongside_from_six_pairs():
    """With 5 pairs the signed-rank test's smallest two-sided p is 2/32 = 0.0625: not given."""
    five = stats.compare(named([0.91, 0.93, 0.92, 0.95, 0.90]), named([0.9, 0.9, 0.9, 0.9, 0.9]))
    six = stats.compare(named([0.91, 0.93, 0.92, 0.95, 0.96, 0.94]), named([0.9] * 6))
    assert five["test"] == six["test"] == "paired t"
    assert five["wilcoxon_p"] is None and six["wilcoxon_p"] == pytest.approx(0.03125)


@pytest.mark.parametrize(
    "values, reference",
    [
        ([0.91, 0.93, 0.92, 0.95], [0.80, 0.84, 0.79]),  # unequal n, clearly apart
        ([0.5, 0.7, 0.6], [0.55, 0.95, 0.35, 0.75, 0.6]),  # unequal variances, overlapping
        ([0.1, 0.1, 0.1], [0.3, 0.2, 0.25]),  # one group without variance
    ],
)
def test_welch_agrees_with_scipy_on_the_values(values, reference):
    """Unmatched seeds (no seed in both groups): Welch, as scipy's `ttest_ind(equal_var=False)`
    on the raw values, and the row says why it is Welch."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = stats.compare(
            named(values, "seed"), [(f"seed={10 + i}", v) for i, v in enumerate(reference)]
        )
    with warnings.catch_warnings():  # scipy warns of precision loss on the constant group
        warnings.simplefilter("ignore", RuntimeWarning)
        theirs = scipy_stats.ttest_ind(values, reference, equal_var=False)
    interval = theirs.confidence_interval(0.95)
    assert (
        ours["test"] == "Welch t"
        and ours["note"] == "Welch: the groups share no replica (seed, fold)"
    )
    assert ours["p"] == pytest.approx(theirs.pvalue)
    assert ours["dof"] == pytest.approx(theirs.df)
    assert (ours["diff_ci95_low"], ours["diff_ci95_high"]) == pytest.approx(
        (interval.low, interval.high)
    )


def test_partly_paired_groups_say_which_test_and_why():
    """A fold missing in one group: paired on the folds both have, naming the one left out;
    one shared fold, or a fold run twice in a group: Welch, saying why."""
    best = named([0.90, 0.95, 0.85, 0.92, 0.88])
    partial = named([0.88, 0.94, 0.83, 0.91])  # fold 4 failed
    result = stats.compare(partial, best)
    assert result["test"] == "paired t" and result["n_pairs"] == 4
    assert result["note"] == "paired on the 4 replicas both groups have; left out: data.fold=4"
    expected = scipy_stats.ttest_rel([v for _, v in partial], [v for _, v in best[:4]])
    assert result["p"] == pytest.approx(expected.pvalue)
    one = stats.compare([("data.fold=0", 0.8), ("data.fold=7", 0.82)], best)
    assert one["test"] == "Welch t"
    assert one["note"] == "Welch: the groups share 1 replica (data.fold=0); a paired test needs 2"
    twice = stats.compare([("data.fold=0", 0.8), ("data.fold=0", 0.82), ("data.fold=1", 0.9)], best)
    assert twice["test"] == "Welch t" and twice["note"].startswith(
        "Welch: a replica (seed, fold) repeats"
    )
    unnamed = stats.compare([("", 0.8), ("", 0.82)], [("", 0.9), ("", 0.91)])
    assert unnamed["test"] == "Welch t"


def test_holm_step_down_by_hand():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.02, None, 0.5]) == pytest.approx([0.04, None, 0.5])  # None: no test
    assert stats.holm([0.6, 0.9]) == [1.0, 1.0]  # capped at 1
    assert stats.holm([0.03]) == [0.03] and stats.holm([]) == []


def test_single_values_and_zero_variance_give_no_nan_and_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's precision or divide warnings would fail here
        single = stats.describe_values([0.9])
        lone = stats.compare(named([0.9]), named([0.8, 0.85]))
        against_lone = stats.compare(named([0.8, 0.85]), named([0.9]))
        same = stats.compare(named([0.9, 0.9, 0.9], "seed"), [("seed=7", 0.9), ("seed=8", 0.9)])
        apart = stats.welch([0.8, 0.8], [0.9, 0.9, 0.9])
        shifted = stats.compare(named([0.5, 0.75, 0.25]), named([0.25, 0.5, 0.0]))
    assert single["std"] is None and single["ci95_low"] is None
    assert single["note"] == "n=1: no interval"
    for result in (lone, against_lone):
        assert result["p"] is None and result["test"] is None
        assert result["diff_ci95_low"] is None and result["note"] == "n=1: no interval"
    assert lone["diff"] == pytest.approx(0.9 - 0.825)
    # no spread at all: the difference is exact, its interval a point, no p-value
    assert same["diff"] == 0 and same["p"] is None and same["diff_ci95_low"] == 0
    assert apart["diff_ci95_low"] == apart["diff"] and "no p-value" in apart["note"]
    # every fold 0.25 better (exact in binary): a paired difference without spread
    assert shifted["test"] == "paired t" and shifted["diff_ci95_low"] == shifted["diff"] == 0.25
    assert (
        shifted["p"] is None
        and shifted["note"] == "every paired difference is the same: no p-value"
    )
    numbers = [v for r in (single, lone, against_lone, same, apart, shifted) for v in r.values()]
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in numbers)


@pytest.mark.parametrize(
    "direction, objective, monitor, monitor_mode, expected",
    [
        ("minimize", "val/acc", "val/acc", "max", "min"),  # Optuna's direction is what it ran
        ("maximize", "val/loss", "val/acc", "max", "max"),
        (None, "val/acc", "val/acc", "max", "max"),  # the monitored metric: its monitor_mode
        (None, "test/dice", "val/dice", "max", "max"),  # test/x and val/x are the same metric
        (None, "val/loss", "val/loss", "min", "min"),
        (None, "test/loss", "val/acc", "max", "min"),  # federate's optimized_metric=test/loss
        (None, "federate/bytes_per_round", "val/acc", "max", "min"),
        (None, "val/r2", "val/mae", "min", "max"),
    ],
)
def test_the_objective_direction(direction, objective, monitor, monitor_mode, expected):
    assert summary_stats.objective_mode(direction, objective, monitor, monitor_mode) == expected


def test_a_loss_objective_under_an_accuracy_monitor_is_minimized_in_the_job_record(tmp_path):
    """`optimized_metric=val/loss` with cnn's `monitor_mode: max`: the record says min, so the
    best job and the best group are the lowest losses."""
    from litlab.config.compose import compose
    from litlab.sweeps.summary import SweepSummary

    cfg = compose("train", ["optimized_metric=val/loss"], output_dir=tmp_path)
    record = SweepSummary()._record(cfg, status="running")
    assert cfg.model.monitor_mode == "max" and record["mode"] == "min"


def _records(
    tmp_path, groups: dict[str, list[float]], metric="val/acc", mode="max", key="data.fold"
):
    """Completed jobs: group lr -> its values, the i-th value being replica `key=i`."""
    records = []
    for lr, values in groups.items():
        for i, value in enumerate(values):
            job = len(records)
            records.append(
                {
                    "job": job,
                    "overrides": [f"model.optimizer.lr={lr}", f"{key}={i}", "trainer=cpu"],
                    "objective_name": metric,
                    "mode": mode,
                    "run_dir": str(tmp_path / str(job)),
                    "status": "completed",
                    "objective": value,
                    "error": "",
                    "wall_s": 1.0,
                    "metrics": {metric: value, "test/loss": 1.0 - value},
                }
            )
    return records


FOLDS = {  # fold 2 is hard for every configuration: pairing removes it
    "0.01": [0.95, 0.97, 0.80, 0.96, 0.94],
    "0.003": [0.94, 0.97, 0.78, 0.95, 0.94],
    "0.001": [0.90, 0.93, 0.74, 0.92, 0.90],
}


def test_a_k_fold_sweep_is_compared_fold_by_fold(tmp_path, capsys):
    """5 folds x 3 configurations: every comparison is the paired t on the folds, Holm-adjusted
    over the 2 groups; no pooled "all jobs" row; the best group's 5 jobs are marked best."""
    write_summary(tmp_path, _records(tmp_path, FOLDS), plot=False)
    printed = capsys.readouterr().out
    with open(tmp_path / "summary_stats.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == summary_stats.CSV_COLUMNS
    best, close, worse = (f"model.optimizer.lr={lr}" for lr in FOLDS)
    assert {r["group"] for r in rows} == {best, close, worse}  # no "all jobs"
    by = {(r["group"], r["metric"]): r for r in rows}
    assert by[(best, "val/acc")]["best"] == "*" and by[(best, "val/acc")]["test"] == ""
    for group, values in ((close, FOLDS["0.003"]), (worse, FOLDS["0.001"])):
        row = by[(group, "val/acc")]
        reference = scipy_stats.ttest_rel(values, FOLDS["0.01"])
        assert (row["test"], row["n_pairs"]) == ("paired t", "5")
        assert float(row["p"]) == pytest.approx(reference.pvalue)
        low, high = reference.confidence_interval(0.95)
        assert (float(row["diff_ci95_low"]), float(row["diff_ci95_high"])) == pytest.approx(
            (low, high)
        )
        welch = stats.welch(values, FOLDS["0.01"])
        assert high - low < 0.5 * (welch["diff_ci95_high"] - welch["diff_ci95_low"])
    p_close, p_worse = float(by[(close, "val/acc")]["p"]), float(by[(worse, "val/acc")]["p"])
    assert float(by[(worse, "val/acc")]["p_holm"]) == pytest.approx(2 * p_worse)  # the smaller
    assert float(by[(close, "val/acc")]["p_holm"]) == pytest.approx(max(p_close, 2 * p_worse))
    assert [by[(g, "val/acc")]["within_noise"] for g in (best, close, worse)] == [
        "",
        "true",
        "false",
    ]
    assert by[(worse, "val/acc")]["verdict"] == "worse than the best, beyond noise"
    assert by[(worse, "test/loss")]["verdict"] == "higher than the best, beyond noise"
    summary = json.loads((tmp_path / "summary_stats.json").read_text())
    assert summary["interval_method"].startswith("Student's t interval of the mean")
    assert summary["sweep"] == "groups" and summary["best_group"] == best
    replicas = next(r for r in summary["groups"] if r["group"] == best)["replicas"]
    assert [(r["replica"], r["job"]) for r in replicas] == [(f"data.fold={i}", i) for i in range(5)]
    with open(tmp_path / "summary.csv") as f:
        marked = [int(r["job"]) for r in csv.DictReader(f) if r["best"] == "*"]
    assert marked == [0, 1, 2, 3, 4]  # the best group, not its best fold
    verdict = (
        f"best group by mean val/acc (max): {best}; within noise of the best: {close}; "
        f"worse than the best, beyond noise: {worse}"
    )
    md = (tmp_path / "summary.md").read_text()
    for text in (printed, md):
        assert verdict in text.splitlines()
        assert f"({summary_stats.RULE})" in text
        assert "| all jobs |" not in text and "(jobs of the best group marked *)" in text


def test_unmatched_seeds_get_welch_and_a_lone_job_no_verdict(tmp_path, capsys):
    """Seeds 0-2 in one group, 3-5 in another: nothing to pair, Welch, said in the row; a
    group of one job has no interval; a failed or diverged job does not count."""
    records = _records(tmp_path, {"0.01": [0.90, 0.92, 0.91], "0.1": [0.5]}, key="seed")
    for r in _records(tmp_path, {"0.003": [0.0, 0.0, 0.0, 0.89, 0.93, 0.90]}, key="seed")[3:]:
        records.append(r | {"job": r["job"] + 10, "run_dir": r["run_dir"] + "x"})
    records.append(records[0] | {"job": 20, "status": "failed", "objective": None, "metrics": {}})
    diverged = {"val/acc": float("nan"), "test/loss": float("inf")}  # completed, nothing to count
    records.append(records[3] | {"job": 21, "objective": float("nan"), "metrics": diverged})
    write_summary(tmp_path, records, plot=False)
    printed = capsys.readouterr().out
    with open(tmp_path / "summary_stats.csv") as f:
        by = {(r["group"], r["metric"]): r for r in csv.DictReader(f)}
    best, same, lone = (f"model.optimizer.lr={lr}" for lr in ("0.01", "0.003", "0.1"))
    row = by[(same, "val/acc")]
    assert (
        row["test"] == "Welch t"
        and row["note"] == "Welch: the groups share no replica (seed, fold)"
    )
    assert float(row["p"]) == pytest.approx(
        stats.welch([0.89, 0.93, 0.90], [0.90, 0.92, 0.91])["p"]
    )
    assert row["within_noise"] == "true" and by[(best, "val/acc")]["n"] == "3"
    assert (
        by[(lone, "val/acc")]["note"] == "n=1: no interval" and by[(lone, "val/acc")]["test"] == ""
    )
    assert by[(lone, "val/acc")]["verdict"] == "no verdict (n=1)"
    assert "nan" not in (tmp_path / "summary_stats.csv").read_text().lower()
    assert f"| {lone} | val/acc | 1 | 0.5000 | n=1: no interval |  |" in printed


def test_every_interval_of_a_bounded_metric_stays_in_its_range(tmp_path, capsys):
    """Three jobs per group, far apart, near the bounds: the acc intervals within [0, 1] and
    the loss intervals >= 0, in the CSV and the JSON, with the method named on each row."""
    wide = {"0.01": [0.999, 0.6, 1.0], "0.1": [0.02, 0.5, 0.01]}
    write_summary(tmp_path, _records(tmp_path, wide), plot=False)
    summary = json.loads((tmp_path / "summary_stats.json").read_text())
    rows = summary["groups"]
    methods = {(r["group"][-4:], r["metric"]): r["ci_method"] for r in rows}
    assert methods == {
        ("0.01", "val/acc"): "Student t, cut to [0, 1]",
        ("0.01", "test/loss"): "Student t, cut to >= 0",
        ("=0.1", "val/acc"): "Student t, cut to [0, 1]",
        ("=0.1", "test/loss"): "Student t",  # [0.12, 1.52]: inside its range
    }
    for r in rows:
        assert r["ci95_low"] >= 0 and (r["metric"] != "val/acc" or r["ci95_high"] <= 1)
    with open(tmp_path / "summary_stats.csv") as f:
        assert all(float(r["ci95_low"]) >= 0 for r in csv.DictReader(f))


def test_a_minimized_objective_picks_the_lowest_mean_group(tmp_path, capsys):
    records = _records(
        tmp_path,
        {"0.01": [0.30, 0.32], "0.003": [0.20, 0.21], "0.1": [0.25, 0.50]},
        "val/loss",
        "min",
    )
    write_summary(tmp_path, records, plot=False)
    data = json.loads((tmp_path / "summary_stats.json").read_text())
    assert data["best_group"] == "model.optimizer.lr=0.003" and data["objective"] == "val/loss"
    diffs = {c["group"]: c["diff"] for c in data["comparisons"] if c["metric"] == "val/loss"}
    assert all(d > 0 for d in diffs.values())  # every other group has a higher loss
    # lr=0.01 is worse on both folds, p = 0.03; Holm over the 2 groups compared: p = 0.06
    close = next(c for c in data["comparisons"] if c["group"] == "model.optimizer.lr=0.01")
    assert close["p"] < 0.05 < close["p_holm"] == pytest.approx(2 * close["p"])
    assert close["verdict"] == "within noise of the best" and close["within_noise"] is True


def test_no_replicas_no_group_statistics(tmp_path, capsys):
    """A plain lr grid (one job per configuration): no statistics (their pooled mean would mean
    nothing), and the summary says how to get some; a sweep of folds alone is one group."""
    write_summary(tmp_path, _records(tmp_path, {"0.01": [0.9], "0.003": [0.8]}), plot=False)
    data = json.loads((tmp_path / "summary_stats.json").read_text())
    assert data["groups"] == data["comparisons"] == [] and data["best_group"] is None
    assert data["sweep"] == summary_stats.NO_REPLICAS
    printed = capsys.readouterr().out
    assert summary_stats.NO_REPLICAS in printed and "each group against the best" not in printed
    write_summary(tmp_path, _records(tmp_path, {"0.01": [0.9, 0.8, 0.85]}), plot=False)
    data = json.loads((tmp_path / "summary_stats.json").read_text())
    assert {r["group"] for r in data["groups"]} == {"all jobs"} and data["comparisons"] == []
    with open(tmp_path / "summary.csv") as f:
        assert [r["best"] for r in csv.DictReader(f)] == ["*", "", ""]  # no groups: the best job
    failed = [
        r | {"status": "failed", "objective": None, "metrics": {}}
        for r in _records(tmp_path, {"0.01": [0.9, 0.8]})
    ]
    write_summary(tmp_path, failed, plot=False)
    assert "(no completed jobs)" in capsys.readouterr().out
    assert json.loads((tmp_path / "summary_stats.json").read_text())["groups"] == []


def test_summary_png_draws_the_groups_with_their_replicas(tmp_path, capsys, monkeypatch):
    """A sweep with groups: one mean with its interval per group and a point per fold (not a
    bar per job); without groups: a bar per job."""
    import matplotlib.figure

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    write_summary(tmp_path, _records(tmp_path, FOLDS), plot=True)
    write_summary(tmp_path, _records(tmp_path, {"0.01": [0.9], "0.003": [0.8]}), plot=True)
    groups, jobs = (fig.axes[0] for fig in drawn)
    labels = [t.get_text() for t in groups.get_xticklabels()]
    assert labels == [f"model.optimizer.lr={lr}\n(n=5)" for lr in FOLDS]
    points = [line for line in groups.lines if line.get_marker() == "o"]
    assert len(points) == 15 and len(groups.patches) == 0
    assert len(groups.containers) == 3  # an error bar (the interval) per group
    assert len(jobs.patches) == 2  # a bar per job


def test_the_summary_callback_imports_no_scipy():
    """Hydra builds the callback for every run, `--help` included: scipy (and numpy) only when
    a summary is written."""
    import subprocess
    import sys

    probe = (
        "import sys, litlab.sweeps.summary; print(sorted({'scipy', 'numpy'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
