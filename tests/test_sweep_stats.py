"""Differences with confidence in the sweep summary: each replica group's mean, std and Student's
t interval, each group against the best one (difference, Welch interval, Welch's p), and the
plain "within noise" verdict, checked against hand-computed values, R's textbook Welch example
and scipy, then through `write_summary` on fake job records (no training)."""

import csv
import json
import math
import warnings

import pytest
from scipy import stats as scipy_stats

from litlab.sweeps import stats, summary_stats
from litlab.sweeps.summary import write_summary

# R's `sleep` data (Student, 1908): extra hours of sleep under two drugs; R's
# `t.test(extra ~ group, data = sleep)` prints the Welch test: t = -1.8608, df = 17.776,
# p-value = 0.07939, 95 percent confidence interval -3.3654832 0.2054832
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_describe_gives_the_student_t_interval_of_the_mean():
    # by hand: mean 2, sd 1, t(0.975, 2) = 4.302653 -> 2 ± 4.302653 / sqrt(3)
    one_two_three = stats.describe([1, 2, 3])
    assert one_two_three["n"] == 3 and one_two_three["mean"] == 2 and one_two_three["std"] == 1
    assert one_two_three["ci95_low"] == pytest.approx(-0.484138, abs=1e-6)
    assert one_two_three["ci95_high"] == pytest.approx(4.484138, abs=1e-6)
    # R: t.test(sleep$extra[1:10]) -> 95 percent confidence interval -0.5297804 2.0297804
    sleep = stats.describe(SLEEP_1)
    assert (sleep["ci95_low"], sleep["ci95_high"]) == pytest.approx((-0.5297804, 2.0297804))
    low, high = scipy_stats.t.interval(0.95, 9, loc=0.75, scale=scipy_stats.sem(SLEEP_1))
    assert (sleep["ci95_low"], sleep["ci95_high"]) == pytest.approx((low, high))


def test_compare_reproduces_the_textbook_welch_test():
    diff = stats.compare(SLEEP_1, SLEEP_2)
    assert diff["diff"] == pytest.approx(0.75 - 2.33)
    assert diff["dof"] == pytest.approx(17.776, abs=1e-3)
    assert diff["welch_p"] == pytest.approx(0.07939, abs=1e-5)
    assert (diff["diff_ci95_low"], diff["diff_ci95_high"]) == pytest.approx((-3.3654832, 0.2054832))
    assert diff["within_noise"] is True and diff["note"] == ""  # p = 0.08: the CI holds 0


@pytest.mark.parametrize(
    "values, reference",
    [
        ([0.91, 0.93, 0.92, 0.95], [0.80, 0.84, 0.79]),  # unequal n, clearly apart
        ([0.5, 0.7, 0.6], [0.55, 0.95, 0.35, 0.75, 0.6]),  # unequal variances, overlapping
        ([0.1, 0.1, 0.1], [0.3, 0.2, 0.25]),  # one group without variance
    ],
)
def test_compare_agrees_with_scipy_welch_on_the_values(values, reference):
    """The same p-value, dof and interval as scipy's `ttest_ind(equal_var=False)` on the raw
    values, and `within_noise` exactly when that interval holds 0."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = stats.compare(values, reference)
    with warnings.catch_warnings():  # scipy warns of precision loss on the constant group
        warnings.simplefilter("ignore", RuntimeWarning)
        theirs = scipy_stats.ttest_ind(values, reference, equal_var=False)
    interval = theirs.confidence_interval(0.95)
    assert ours["welch_p"] == pytest.approx(theirs.pvalue)
    assert ours["dof"] == pytest.approx(theirs.df)
    assert (ours["diff_ci95_low"], ours["diff_ci95_high"]) == pytest.approx(
        (interval.low, interval.high)
    )
    assert ours["within_noise"] is bool(interval.low <= 0 <= interval.high)


def test_single_values_and_zero_variance_give_no_nan_and_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's precision or divide warnings would fail here
        single = stats.describe([0.9])
        lone = stats.compare([0.9], [0.8, 0.85])
        against_lone = stats.compare([0.8, 0.85], [0.9])
        same = stats.compare([0.9, 0.9, 0.9], [0.9, 0.9])
        apart = stats.compare([0.8, 0.8], [0.9, 0.9, 0.9])
    assert single["std"] is None and single["ci95_low"] is None
    assert single["note"] == "n=1: no interval"
    for result in (lone, against_lone):
        assert result["welch_p"] is None and result["within_noise"] is None
        assert result["diff_ci95_low"] is None and result["note"] == "n=1: no interval"
    assert lone["diff"] == pytest.approx(0.9 - 0.825)
    # no spread at all: the difference is exact, its interval a point, no p-value
    assert same["diff"] == 0 and same["within_noise"] is True and same["welch_p"] is None
    assert apart["within_noise"] is False and apart["diff_ci95_low"] == apart["diff"]
    assert "no p-value" in apart["note"]
    numbers = [v for r in (single, lone, against_lone, same, apart) for v in r.values()]
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


def _records(tmp_path, groups: dict[str, list[float]], metric="val/acc", mode="max"):
    records = []
    for lr, values in groups.items():
        for seed, value in enumerate(values):
            job = len(records)
            records.append(
                {
                    "job": job,
                    "overrides": [f"model.optimizer.lr={lr}", f"seed={seed}", "trainer=cpu"],
                    "objective_name": metric,
                    "mode": mode,
                    "run_dir": str(tmp_path / str(job)),
                    "status": "completed",
                    "objective": value,
                    "error": "",
                    "wall_s": 1.0,
                    "metrics": {metric: value, "test/acc": 0.5 + value / 10},
                }
            )
    return records


def test_summary_files_and_printed_table_say_which_groups_are_within_noise(tmp_path, capsys):
    """lr=0.01 is best on average; lr=0.003 holds the best single job but is within noise of
    it; lr=0.001 is worse beyond noise; lr=0.1 has one seed (no interval, no p); a failed job
    does not count."""
    records = _records(
        tmp_path,
        {
            "0.01": [0.90, 0.92, 0.91],
            "0.003": [0.89, 0.93, 0.90],
            "0.001": [0.80, 0.82, 0.81],
            "0.1": [0.5],
        },
    )
    records.append(records[0] | {"job": 10, "status": "failed", "objective": None, "metrics": {}})
    diverged = {"val/acc": float("nan"), "test/acc": float("inf")}  # completed, nothing to count
    records.append(records[9] | {"job": 11, "objective": float("nan"), "metrics": diverged})
    write_summary(tmp_path, records, plot=False)
    printed = capsys.readouterr().out
    with open(tmp_path / "summary_stats.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == summary_stats.CSV_COLUMNS
    by = {(r["group"], r["metric"]): r for r in rows}
    best, same, worse, lone = (
        f"model.optimizer.lr={lr}" for lr in ("0.01", "0.003", "0.001", "0.1")
    )
    assert by[("all jobs", "val/acc")]["n"] == "10" and by[(best, "val/acc")]["best"] == "*"
    assert float(by[(best, "val/acc")]["ci95_low"]) == pytest.approx(
        0.91 - 4.302653 * 0.01 / 3**0.5
    )
    reference = stats.compare([0.89, 0.93, 0.90], [0.90, 0.92, 0.91])
    assert float(by[(same, "val/acc")]["welch_p"]) == pytest.approx(reference["welch_p"])
    assert float(by[(same, "val/acc")]["diff_ci95_high"]) == pytest.approx(
        reference["diff_ci95_high"]
    )
    assert [by[(g, "val/acc")]["within_noise"] for g in (best, same, worse, lone)] == [
        "",
        "true",
        "false",
        "",
    ]
    assert by[(worse, "test/acc")]["within_noise"] == "false"  # other metrics vs the same group
    assert by[(lone, "val/acc")]["note"] == "n=1: no interval"
    assert by[(lone, "val/acc")]["std"] == by[(lone, "val/acc")]["welch_p"] == ""
    assert "nan" not in (tmp_path / "summary_stats.csv").read_text().lower()
    data = json.loads((tmp_path / "summary_stats.json").read_text())
    assert data["best_group"] == best and data["mode"] == "max" and data["confidence"] == 0.95
    assert {c["group"] for c in data["comparisons"]} == {same, worse, lone}
    verdict = (
        f"best group by mean val/acc (max): {best}; within noise of it: {same}; "
        f"worse beyond noise: {worse}; no verdict (n=1): {lone}"
    )
    md = (tmp_path / "summary.md").read_text()
    for text in (printed, md):
        assert verdict in text.splitlines()
        assert "(within noise: the 95% interval of the difference contains 0)" in text
        assert f"| {lone} | val/acc | 1 | 0.5000 | n=1: no interval |" in text
    assert "## each group against the best" in md and "\neach group against the best" in printed


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


def test_no_replicas_no_group_statistics(tmp_path, capsys):
    """A plain lr grid (one job per configuration): only the "all jobs" rows, no comparison
    rows, as before; a sweep of seeds alone is one group: "all jobs" too."""
    for groups in ({"0.01": [0.9], "0.003": [0.8]}, {"0.01": [0.9, 0.8, 0.85]}):
        write_summary(tmp_path, _records(tmp_path, groups), plot=False)
        data = json.loads((tmp_path / "summary_stats.json").read_text())
        assert {r["group"] for r in data["groups"]} == {"all jobs"}
        assert data["comparisons"] == [] and data["best_group"] is None
    assert "each group against the best" not in capsys.readouterr().out
    failed = [
        r | {"status": "failed", "objective": None, "metrics": {}}
        for r in _records(tmp_path, {"0.01": [0.9, 0.8]})
    ]
    write_summary(tmp_path, failed, plot=False)
    assert "(no completed jobs)" in capsys.readouterr().out
    assert json.loads((tmp_path / "summary_stats.json").read_text())["groups"] == []


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
