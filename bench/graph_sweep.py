"""Mean ± std of a metric over the jobs of a multirun, and its wall time, from the jobs' CSV
logs (until the generic multirun summary lands):

    python bench/graph_sweep.py logs/sweeps/gcn_cora [more sweep dirs] [--metric test/acc]

`--pool` treats the dirs as parts of one sweep (e.g. folds run as two processes). `--curve
val/acc` also prints the best epoch of the jobs' mean per-epoch curve: the protocol of
Xu et al. (GIN) when each fold validated on its test fold (`data.val_fraction=0`): optimistic.
"""

import argparse
from datetime import datetime
from pathlib import Path

import pandas as pd


def stamp(line: str) -> datetime:
    return datetime.strptime(line[1:20], "%Y-%m-%d %H:%M:%S")


def summarize(sweeps: list[Path], metric: str) -> str:
    values = []
    for csv in sorted(c for sweep in sweeps for c in sweep.glob("*/csv/metrics.csv")):
        column = pd.read_csv(csv).get(metric)
        if column is not None and column.notna().any():  # finished jobs only
            values.append(column.dropna().iloc[-1] * 100)
    logs = [p.read_text().splitlines() for sweep in sweeps for p in sweep.glob("*/train.log")]
    logs = [lines for lines in logs if lines]
    wall = (max(stamp(ls[-1]) for ls in logs) - min(stamp(ls[0]) for ls in logs)).total_seconds()
    s = pd.Series(values)
    return (
        f"{' + '.join(map(str, sweeps))}: {metric} {s.mean():.2f} ± {s.std():.2f} % over {len(s)} jobs "
        f"(min {s.min():.1f}, max {s.max():.1f}), wall {wall / 60:.0f} min"
    )


def best_epoch_of_mean_curve(sweeps: list[Path], metric: str) -> str:
    curves = {}
    for csv in sorted(c for sweep in sweeps for c in sweep.glob("*/csv/metrics.csv")):
        frame = pd.read_csv(csv)
        if "test/acc" in frame and frame["test/acc"].notna().any():  # finished jobs only
            curves[csv] = frame.dropna(subset=[metric]).groupby("epoch")[metric].last()
    mean = pd.DataFrame(curves).dropna().mean(axis=1) * 100
    spread = pd.DataFrame(curves).dropna().std(axis=1) * 100
    epoch = mean.idxmax()
    return (
        f"{' + '.join(map(str, sweeps))}: best epoch of the mean {metric} curve over {len(curves)} jobs: epoch "
        f"{epoch}, {mean[epoch]:.2f} ± {spread[epoch]:.2f} % (last epoch {mean.iloc[-1]:.2f} %)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--metric", default="test/acc")
    parser.add_argument("--curve", default=None, help="e.g. val/acc")
    parser.add_argument("--pool", action="store_true", help="the dirs are parts of one sweep")
    args = parser.parse_args()
    for sweep in [args.sweeps] if args.pool else [[s] for s in args.sweeps]:
        print(summarize(sweep, args.metric))
        if args.curve:
            print(best_epoch_of_mean_curve(sweep, args.curve))
