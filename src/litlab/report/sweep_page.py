"""The sections of a sweep's report: the jobs table, the objective per job, parallel
coordinates of the settings against the objective, Optuna's parameter importance (a search),
and the comparison of groups of replicas from the summary's statistics (`groups`). A section
that does not apply to this sweep (importance without an Optuna study, settings when none
varies, groups without replicas) is left out rather than shown empty."""

from pathlib import Path

from litlab.report import figures, files, groups, jobs
from litlab.report import figures as study
from litlab.report.page import Page

SHOWN_METRICS = ("val/", "test/")


def add_sweep(page: Page, sweep: Path) -> None:
    found, unreadable = jobs.load_jobs(sweep)
    stats = groups.read_groups(sweep)
    best = groups.best_jobs(stats)
    in_group = bool(best)
    if not best and (one := jobs.best_job(found)) is not None:
        best = {one}
    objective = next((j["objective_name"] for j in found), "objective")
    jobs_table(page, found, unreadable, best, objective, in_group)
    if not found:
        return
    groups.add(page, sweep, stats, objective)
    has_study = files.inside(sweep, "optuna.db") is not None
    with study.opened(sweep) as (the_study, why):
        settings(page, found, objective, the_study, has_study)
        if has_study:
            page.add("Parameter importance (Optuna search)", *importance(page, the_study, why))


def jobs_table(
    page: Page, found: list[dict], unreadable: list[str], best: set, objective: str, in_group: bool
) -> None:
    """The jobs, the best one's (or the best group's) highlighted."""
    parts = []
    if not found:
        parts.append(page.missing("No job records (sweep_job.json) in this sweep dir yet"))
    keys = list(dict.fromkeys(k for j in found for k in j["settings"]))
    marked = " (best group)" if in_group else " (best)"
    metrics = sorted({m for j in found for m in j["metrics"] if m.startswith(SHOWN_METRICS)})
    rows = [
        {
            "job": j["job"],
            "status": j["status"] + (marked if j["job"] in best else ""),
            f"objective ({objective})": j["objective"],
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
    columns = [
        "job",
        "status",
        f"objective ({objective})",
        *keys,
        *metrics,
        "wall_s",
        "folder",
        "error",
    ]
    if found:
        parts.append(page.table(rows, columns, classes))
    bad = [j for j in found if j["status"] != "completed"]
    if bad:
        parts.append(
            page.missing(
                f"{len(bad)} of {len(found)} jobs did not complete ("
                + ", ".join(f"job {j['job']}: {j['status']}" for j in bad)
                + "): they have no objective and no metrics; their errors are in the table"
            )
        )
    if unreadable:
        parts.append(
            page.missing(
                f"Job records left out (not as the sweep writes them): {', '.join(unreadable)}"
            )
        )
    page.add(f"Jobs ({len(found)})", *parts)
    if found:
        page.add(
            "Objective per job", page.figure(figures.objective_per_job(found, objective, best))
        )


def settings(page: Page, found: list[dict], objective: str, the_study, has_study: bool) -> None:
    """Optuna's parallel coordinates for a search (its reason when it cannot draw them), the
    grid's settings otherwise; left out when no setting varies."""
    if has_study and the_study is not None:
        fig, problem = study.plot("parallel", the_study)
        if fig is None:
            page.add(
                "Settings against the objective",
                page.missing(f"No parallel coordinates: {problem}"),
            )
            return
    else:
        keys = list(dict.fromkeys(k for j in found for k in j["settings"]))
        fig = figures.parallel_coordinates(found, keys, objective)
    if fig is not None:
        page.add("Settings against the objective", page.figure(fig))


def importance(page: Page, the_study, why: str) -> list[str]:
    if the_study is None:
        return [page.missing(f"No parameter importance: {why}")]
    fig, problem = study.plot("importance", the_study)
    if fig is None:
        return [page.missing(f"No parameter importance: {problem}")]
    return [page.figure(fig)]
