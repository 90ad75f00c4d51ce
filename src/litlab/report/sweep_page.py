"""The sections of a sweep's report: the jobs table, the objective per job, parallel
coordinates of the settings against the objective, Optuna's parameter importance (a search),
and the comparison of groups of replicas from the summary's statistics."""

from pathlib import Path

from litlab.report import figures, files, jobs, study
from litlab.report.page import Page

SHOWN_METRICS = ("val/", "test/")


def add_sweep(page: Page, sweep: Path) -> None:
    found, unreadable = jobs.load(sweep)
    best = jobs.best_job(found)
    objective = next((j["objective_name"] for j in found), "objective")
    table(page, found, unreadable, best, objective)
    if not found:
        return
    with study.opened(sweep) as (the_study, why):
        settings(page, found, objective, the_study)
        page.add("Parameter importance (Optuna search)", *importance(page, the_study, why))
    groups(page, sweep, objective)


def table(page: Page, found: list[dict], unreadable: list[str], best, objective: str) -> None:
    parts = []
    if not found:
        parts.append(page.missing("No job records (sweep_job.json) in this sweep dir yet"))
    keys = list(dict.fromkeys(k for j in found for k in j["settings"]))
    metrics = sorted({m for j in found for m in j["metrics"] if m.startswith(SHOWN_METRICS)})
    rows = [
        {
            "job": j["job"],
            "status": j["status"] + (" (best)" if j["job"] == best else ""),
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
        "best" if j["job"] == best else "bad" if j["status"] != "completed" else "" for j in found
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


def settings(page: Page, found: list[dict], objective: str, the_study) -> None:
    if the_study is not None:
        fig, problem = study.plot("parallel", the_study)
    else:
        keys = list(dict.fromkeys(k for j in found for k in j["settings"]))
        fig = figures.parallel_coordinates(found, keys, objective)
        problem = "needs a setting that varies and a completed job with an objective"
    part = (
        page.figure(fig) if fig is not None else page.missing(f"No parallel coordinates: {problem}")
    )
    page.add("Settings against the objective", part)


def importance(page: Page, the_study, why: str) -> list[str]:
    if the_study is None:
        return [page.missing(f"No parameter importance: {why}")]
    fig, problem = study.plot("importance", the_study)
    if fig is None:
        return [page.missing(f"No parameter importance: {problem}")]
    return [page.figure(fig)]


def groups(page: Page, sweep: Path, objective: str) -> None:
    """summary_stats.json when there (its tables: groups, comparisons, ...), else
    summary_stats.csv; a chart of each group's mean objective with its interval."""
    data, _ = files.read_json(sweep, "summary_stats.json")
    tables: dict[str, list[dict]] = {}
    notes = []
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                tables[key] = value
            elif isinstance(value, str | int | float | bool) or value is None:
                notes.append(f"{key}: {value}")
    if not tables and (rows := files.read_csv(sweep, "summary_stats.csv")):
        tables["groups"] = rows
    if not tables:
        page.add(
            "Group comparison",
            page.missing(
                "No group comparison: summary_stats.csv is absent or empty (the sweep's summary "
                "writes it when jobs complete)"
            ),
        )
        return
    parts = [page.text("; ".join(notes))] if notes else []
    for name, rows in tables.items():
        columns = list(dict.fromkeys(k for r in rows for k in r))
        parts += [page.text(name), page.table(rows, columns)]
    chart = figures.group_means(tables.get("groups", []), objective)
    parts += [page.figure(chart)] if chart is not None else []
    page.add("Group comparison", *parts)
