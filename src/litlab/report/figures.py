"""The report's plotly figures that Optuna does not draw: learning curves from the CSV
logger's rows, the objective per job, and parallel coordinates of a grid's settings."""

from litlab.report.files import number

LAYOUT = {"height": 360, "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "template": "plotly_white"}


def learning_curves(rows: list[dict]) -> list:
    """One figure per metric name (loss, acc, ...): a line per split against the epoch (the
    values logged once per epoch), then the learning rate against the step when logged."""
    import plotly.graph_objects as go

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


def objective_per_job(jobs: list[dict], objective: str, best: int | None):
    """A bar per completed job (the best one gold); failed, pruned or incomplete jobs are red
    crosses at 0, named in their hover text."""
    import plotly.graph_objects as go

    fig = go.Figure()
    done = [j for j in jobs if j["objective"] is not None and j["status"] == "completed"]
    fig.add_trace(
        go.Bar(
            x=[str(j["job"]) for j in done],
            y=[j["objective"] for j in done],
            marker_color=["gold" if j["job"] == best else "steelblue" for j in done],
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
    import plotly.graph_objects as go

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
            dims.append(
                {
                    "label": key,
                    "values": [names.index(str(v)) for v in values],
                    "tickvals": list(range(len(names))),
                    "ticktext": names,
                }
            )
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


def group_means(rows: list[dict], objective: str):
    """Each group's mean objective with its 95% interval (else ± std), from the summary's
    statistics rows; None when no row is of the objective."""
    import plotly.graph_objects as go

    picked = [
        r for r in rows if str(r.get("metric")) == objective and number(r.get("mean")) is not None
    ]
    if not picked:
        return None
    means = [number(r["mean"]) for r in picked]
    low = [number(r.get("ci95_low")) for r in picked]
    high = [number(r.get("ci95_high")) for r in picked]
    if all(v is not None for v in low + high):
        error = {
            "type": "data",
            "symmetric": False,
            "array": [h - m for h, m in zip(high, means)],
            "arrayminus": [m - lo for m, lo in zip(means, low)],
        }
        what = "95% interval"
    else:
        error = {"type": "data", "array": [number(r.get("std")) or 0.0 for r in picked]}
        what = "± std"
    names = [f"{r.get('group')} (n={r.get('n')})" for r in picked]
    fig = go.Figure(go.Bar(x=names, y=means, error_y=error))
    fig.update_layout(title=f"mean {objective} per group ({what})", yaxis_title=objective, **LAYOUT)
    return fig
