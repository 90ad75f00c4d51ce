"""The report's plotly figures that Optuna does not draw: learning curves from the CSV
logger's rows, the objective per job, parallel coordinates of a grid's settings, and the
groups' means with their intervals and replicas.

The Optuna study of a search, read from a copy of the sweep dir's `optuna.db` (the report
never writes into a study, and a worker still running keeps its file to itself)."""

import contextlib
import shutil
import tempfile
from pathlib import Path

import plotly.graph_objects as go

from litlab.errors import one_line
from litlab.report import files
from litlab.report.files import number

LAYOUT = {"height": 360, "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "template": "plotly_white"}


def learning_curves(rows: list[dict]) -> list:
    """One figure per metric name (loss, acc, ...): a line per split against the epoch (the
    values logged once per epoch), then the learning rate against the step when logged."""
    series: dict[str, dict[str, list]] = {}  # metric -> split -> [(x, y)]
    for row in rows:
        for key, raw in row.items():
            value = number(raw)
            if value is None or key in ("epoch", "step") or key is None:
                continue
            if "/" in key:
                split, metric = key.split("/", 1)
                x = number(row.get("epoch"))
            else:
                metric = "learning rate" if key.startswith("lr") else key
                split = key
                x = number(row.get("step"))
            if x is not None and split != "test":  # test: one value, in the final metrics
                series.setdefault(metric, {}).setdefault(split, []).append((x, value))
    figures = []
    for metric, splits in series.items():
        fig = go.Figure()
        for split, points in splits.items():
            xs, ys = zip(*points)
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=split))
        x_title = "step" if metric == "learning rate" or metric in splits else "epoch"
        fig.update_layout(title=metric, xaxis_title=x_title, yaxis_title=metric, **LAYOUT)
        if x_title == "epoch":  # whole epochs on the axis
            last = max(x for points in splits.values() for x, _ in points)
            fig.update_xaxes(dtick=max(1, round(last / 10)))
        figures.append(fig)
    return figures


def objective_per_job(jobs: list[dict], objective: str, best: set):
    """A bar per completed job (gold: the best one, or the best group's jobs); failed, pruned
    or incomplete jobs are red crosses at 0, named in their hover text."""
    fig = go.Figure()
    done = [j for j in jobs if j["objective"] is not None and j["status"] == "completed"]
    fig.add_trace(
        go.Bar(
            x=[str(j["job"]) for j in done],
            y=[j["objective"] for j in done],
            marker_color=["gold" if j["job"] in best else "steelblue" for j in done],
            hovertext=[j["varying"] for j in done],
            name="completed",
        )
    )
    other = [j for j in jobs if j not in done]
    if other:
        fig.add_trace(
            go.Scatter(
                x=[str(j["job"]) for j in other],
                y=[0] * len(other),
                mode="markers",
                marker={"symbol": "x", "color": "red", "size": 12},
                hovertext=[f"{j['status']}: {j['error']}" for j in other],
                name="failed / pruned / incomplete",
            )
        )
    fig.update_layout(
        title=f"{objective} per job", xaxis_title="job", yaxis_title=objective, **LAYOUT
    )
    fig.update_xaxes(type="category")
    return fig


def parallel_coordinates(jobs: list[dict], keys: list[str], objective: str):
    """Each setting that varies an axis (text values numbered, their names as ticks), and the
    objective the last axis, coloured by it; completed jobs only. None without two axes."""
    done = [j for j in jobs if j["objective"] is not None and j["status"] == "completed"]
    dims = []
    for key in keys:
        values = [j["settings"].get(key, "") for j in done]
        if len(set(values)) < 2:
            continue
        numbers = [number(v) for v in values]
        if all(n is not None for n in numbers):
            dims.append({"label": key, "values": numbers})
        else:
            names = sorted(set(map(str, values)))
            ticks = {"tickvals": list(range(len(names))), "ticktext": names}
            dims.append({"label": key, "values": [names.index(str(v)) for v in values], **ticks})
    if not dims or not done:
        return None
    scores = [j["objective"] for j in done]
    dims.append({"label": objective, "values": scores})
    line = {"color": scores, "colorscale": "Viridis", "showscale": True}
    fig = go.Figure(go.Parcoords(line=line, dimensions=dims))
    fig.update_layout(
        title=f"settings against {objective}",
        **{**LAYOUT, "height": 440, "margin": {"l": 80, "r": 40, "t": 100, "b": 40}},
    )
    return fig


def group_means(rows: list[dict], objective: str, best_group: str | None):
    """Each group's mean objective (gold: the best group) with its 95% interval as an error
    bar, each seed or fold a grey point beside it (hover: which one, its job and value), and a
    faint line joining the same seed or fold across groups: the pairs a paired test compares.
    None without a row."""
    if not rows:
        return None
    offset = files.replica_offsets(rows)
    fig = go.Figure()
    lines: dict[str, tuple[list, list]] = {}
    for x, row in enumerate(rows):
        for r in row["replicas"]:
            xs, ys = lines.setdefault(r["replica"], ([], []))
            xs.append(x + offset[r["replica"]])
            ys.append(r["value"])
    for name, (xs, ys) in lines.items():
        joined = bool(name) and len(xs) > 1
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines+markers" if joined else "markers",
                line={"color": "rgba(120,120,120,0.35)", "width": 1},
                marker={"color": "grey", "size": 7},
                name=name or "replica",
                hovertemplate=f"{name or 'replica'}: %{{y:.4g}}<extra></extra>",
                showlegend=False,
            )
        )
    for x, row in enumerate(rows):
        colour = "goldenrod" if row["group"] == best_group else "steelblue"
        error = None
        if row["ci95_low"] is not None and row["ci95_high"] is not None:
            error = {
                "type": "data",
                "symmetric": False,
                "array": [row["ci95_high"] - row["mean"]],
                "arrayminus": [row["mean"] - row["ci95_low"]],
                "thickness": 2,
                "width": 10,
            }
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[row["mean"]],
                mode="markers",
                marker={"symbol": "diamond", "size": 13, "color": colour},
                error_y=error,
                name=row["group"],
                hovertemplate=f"mean %{{y:.4g}} (n={_count(row['n'])}){_span(row)}<extra></extra>",
                showlegend=False,
            )
        )
    fig.update_layout(
        title=f"mean {objective} per group with its 95% interval (gold: best; grey: each seed or fold)",
        yaxis_title=objective,
        **{**LAYOUT, "height": 420},
    )
    fig.update_xaxes(
        tickvals=list(range(len(rows))),
        ticktext=[f"{r['group']} (n={_count(r['n'])})" for r in rows],
        range=[-0.6, len(rows) - 0.4],
    )
    return fig


def _count(n) -> str:
    return "?" if n is None else str(int(n))


def _span(row: dict) -> str:
    if row["ci95_low"] is None or row["ci95_high"] is None:
        return ""
    return f"<br>95% interval [{row['ci95_low']:.4g}, {row['ci95_high']:.4g}]"


# ----------------------------------------------------------------- study
NO_STUDY = (
    "no Optuna study in this sweep dir (optuna.db): a grid sweep, or a search whose study lives "
    "on a database server"
)


@contextlib.contextmanager
def opened(sweep: Path):
    """Yields (the study or None, why there is none)."""
    db = files.inside(sweep, "optuna.db")
    if db is None:
        yield None, NO_STUDY
        return
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="litlab-report-") as tmp:
        copy = Path(tmp) / "optuna.db"
        shutil.copyfile(db, copy)
        try:
            storage = optuna.storages.RDBStorage(f"sqlite:///{copy}")
            names = optuna.get_all_study_names(storage)
            name = sweep.name if sweep.name in names else (names or [None])[0]
            study = optuna.load_study(study_name=name, storage=storage) if name else None
        except Exception as err:  # noqa: BLE001  (a file that is no study: said on the page)
            yield None, f"optuna.db cannot be read as an Optuna study ({one_line(err)})"
            return
        yield study, "" if study else "optuna.db holds no study"
        storage.engine.dispose()


def plot(kind: str, study) -> tuple[object, str]:
    """(Optuna's figure, "") or (None, why it cannot be drawn): kind is `importance` or
    `parallel`."""
    import warnings

    import optuna.visualization as vis

    draw = vis.plot_param_importances if kind == "importance" else vis.plot_parallel_coordinate
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning and friends: not the page's
            return draw(study), ""
    except Exception as err:  # noqa: BLE001  (e.g. fewer than 2 completed trials)
        return None, one_line(err)
