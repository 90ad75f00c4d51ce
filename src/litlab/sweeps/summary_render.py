"""The sweep summary's files for people: summary.md tables and the objective plot (summary.png).
matplotlib is imported only when the plot is drawn."""

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


def plot_objective(records: list[dict], best: int | None, objective: str, path: Path) -> None:
    """One bar per job (failed jobs are red crosses at the bottom); the best job is gold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * len(records) + 2), 3.5))
    for i, r in enumerate(records):
        if r["status"] == "completed" and finite(r["objective"]):
            ax.bar(i, r["objective"], color="gold" if i == best else "tab:blue")
        else:
            ax.plot(i, 0, "x", color="tab:red", markersize=10)
    ax.set_xticks(range(len(records)), [str(r["job"]) for r in records])
    ax.set_xlabel("job (x: failed, pruned or incomplete)")
    ax.set_ylabel(objective)
    ax.set_title("objective per job")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
