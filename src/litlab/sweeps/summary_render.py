"""The sweep summary's files for people: summary.md tables and its plot (summary.png: the
groups' means with their intervals and replicas, or the objective per job when the sweep has
no groups to compare). matplotlib is imported only when the plot is drawn."""

import math
from pathlib import Path


def finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value).replace("|", "\\|")


def markdown(rows: list[dict], columns: list[str]) -> str:
    names = ["overrides" if c == "varying" else c for c in columns]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def replica_offsets(rows: list[dict], width: float = 0.3) -> dict[str, float]:
    """Where each replica's point sits left or right of its group (the same fold or seed at
    the same place in every group, so the lines joining a replica across groups are level)."""
    names = sorted({str(r["replica"]) for row in rows for r in row["replicas"]})
    if len(names) < 2:
        return dict.fromkeys(names, 0.0)
    return {name: -width / 2 + width * i / (len(names) - 1) for i, name in enumerate(names)}


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
    labels = [f"{_wrap(r['group'])}\n(n={r['n']})" for r in rows]
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel(stats["objective"])
    ax.set_title(
        f"mean {stats['objective']} per group with its 95% interval (gold: best group)\n"
        "grey: each seed or fold, joined across groups",
        fontsize=9,
    )
    return fig


def _wrap(text: str, width: int = 28) -> str:
    words, lines = str(text).split(), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    return "\n".join(lines)


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
