"""What a federated run leaves in its run dir: history.csv/.png (rewritten atomically after
every round), the per-client class histogram (client_classes.csv/.png), and the summary."""

import csv
import io
import os
from pathlib import Path

import numpy as np

COLUMNS = (
    "round",
    "accuracy",
    "loss",
    "clients",
    "failed",
    "bytes_sent",
    "bytes_uncompressed",
    "train_s",
    "failures",
)


def history_rows(
    rounds: list[dict], evaluation: dict[int, dict[str, float]], clients: dict | None = None
) -> list[dict]:
    """One row per round (round 0: the initial global model): central test metrics, then the
    clients' own evaluation (`client_<metric>_mean`, `client_<metric>_worst`, ...)."""
    clients = clients or {}
    by_round = {r["round"]: r for r in rounds}
    rows = []
    for rnd in sorted(set(evaluation) | set(by_round)):
        metrics = evaluation.get(rnd, {})
        row = {
            "round": rnd,
            "accuracy": metrics.get("test/acc", np.nan),
            "loss": metrics.get("test/loss", np.nan),
            "clients": 0,
            "failed": 0,
            "bytes_sent": 0,
            "bytes_uncompressed": 0,
            "train_s": 0.0,
            "failures": "",
        }
        row.update({k: v for k, v in by_round.get(rnd, {}).items() if k in COLUMNS})
        row.update({k: v for k, v in metrics.items() if k not in ("test/acc", "test/loss")})
        row.update(clients.get(rnd, {}))
        rows.append(row)
    return rows


def _replace(path: Path, data: bytes) -> None:
    """Write beside the target, fsync, rename: a reader (or a kill) sees the old or the new."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_history(out: Path, rows: list[dict], metric: str = "acc") -> None:
    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=[*COLUMNS, *extra], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    _replace(out / "history.csv", text.getvalue().encode())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc, sent) = plt.subplots(1, 2, figsize=(10, 3.5))
    x = [r["round"] for r in rows]
    central = "accuracy" if metric == "acc" else f"test/{metric}"
    acc.plot(x, [r.get(central, np.nan) for r in rows], marker="o", label="global, central test")
    mean, worst = f"client_{metric}_mean", f"client_{metric}_worst"
    if any(mean in r for r in rows):
        acc.plot(x, [r.get(mean, np.nan) for r in rows], marker=".", label="clients, weighted mean")
        acc.plot(x, [r.get(worst, np.nan) for r in rows], ls="--", label="worst client")
        acc.legend(fontsize="small")
    acc.set(xlabel="round", ylabel=f"test {metric}", title="Global model")
    acc.grid(alpha=0.3)
    sent.bar(x, [r["bytes_sent"] / 1e6 for r in rows])
    sent.set(xlabel="round", ylabel="MB sent by clients", title="Communication")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    _replace(out / "history.png", buffer.getvalue())


def write_class_histogram(out: Path, counts: np.ndarray) -> None:
    """client_classes.csv (clients x classes) and a stacked bar chart of it."""
    with open(out / "client_classes.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["client", *[f"class_{c}" for c in range(counts.shape[1])], "total"])
        for client, row in enumerate(counts):
            writer.writerow([client, *row.tolist(), int(row.sum())])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(5, 0.45 * len(counts) + 2), 3.5))
    bottom = np.zeros(len(counts))
    for c in range(counts.shape[1]):
        ax.bar(np.arange(len(counts)), counts[:, c], bottom=bottom, label=str(c))
        bottom += counts[:, c]
    ax.set(xlabel="client", ylabel="training samples", title="Classes per client")
    ax.legend(title="class", fontsize="small", ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "client_classes.png", dpi=100)
    plt.close(fig)


def print_summary(
    out: Path, rows: list[dict], checkpoint: Path | None, seconds: float, metric: str = "acc"
) -> str:
    done = [r for r in rows if r["round"] > 0]
    last = rows[-1]
    key = "accuracy" if metric == "acc" else f"test/{metric}"
    mean, worst = f"client_{metric}_mean", f"client_{metric}_worst"
    sent = sum(r["bytes_sent"] for r in done)
    dense = sum(r["bytes_uncompressed"] for r in done)
    failed = sum(r["failed"] for r in done)
    lines = [
        "",
        "Federated results",
        f"  rounds           {len(done)} ({seconds:.1f} s in this process)",
        (
            f"  {'test/' + metric:<16} {last[key]:.4f} (round 0: {rows[0][key]:.4f}, "
            f"best {max(r[key] for r in rows):.4f})"
        ),
        f"  test/loss        {last['loss']:.4f}",
        *(
            [f"  clients' {metric:<7} {last[mean]:.4f} weighted mean, {last[worst]:.4f} worst"]
            if mean in last
            else []
        ),
        (
            f"  sent by clients  {sent / 1e6:.2f} MB"
            + (f" ({1 - sent / dense:.0%} less than uncompressed)" if dense else "")
        ),
        f"  failed updates   {failed}",
        "Files",
        f"  run dir          {out}",
        f"  history          {out / 'history.csv'} (.png)",
        f"  classes          {out / 'client_classes.csv'} (.png)",
        f"  checkpoint       {checkpoint or '(none written)'}",
    ]
    return "\n".join(lines)
