"""Federated bars on digits: 10 clients, 20 rounds, 1 local epoch (docs/federated.md).

    OMP_NUM_THREADS=1 .venv/bin/python bench/federated.py [--rounds 20] [--only dirichlet,iid]

Runs `python src/federate.py` once per setting (a fresh process each: Ray included) and prints a
Markdown table for BENCHMARKS.md. Bars: Dirichlet(0.5) global test accuracy >= 95% within 3
minutes on 2 cores; IID >= 98%; int8 / top-k updates send >= 60% fewer bytes per round with
accuracy within 1 point of the uncompressed Dirichlet run.
"""

import argparse
import csv
import json
import tempfile
from pathlib import Path

from common import PY, table, time_command

SETTINGS = {  # name -> overrides
    "dirichlet": ["federate.partition=dirichlet", "federate.alpha=0.5"],
    "iid": ["federate.partition=iid"],
    "int8": ["federate.partition=dirichlet", "federate.alpha=0.5", "federate.compression=int8"],
    "topk": [
        "federate.partition=dirichlet",
        "federate.alpha=0.5",
        "federate.compression=topk",
        "federate.topk_ratio=0.25",
    ],
}


def run(name: str, rounds: int, out: Path) -> list:
    cmd = [
        PY,
        "src/federate.py",
        f"hydra.run.dir={out / name}",
        "extras.print_config=false",
        "federate.num_clients=10",
        f"federate.rounds={rounds}",
        "federate.local_epochs=1",
        *SETTINGS[name],
    ]
    seconds, _ = time_command(cmd)
    metrics = json.loads((out / name / "metrics.json").read_text())
    with open(out / name / "history.csv") as f:
        rows = [r for r in csv.DictReader(f) if int(r["round"]) > 0]
    sent = sum(int(r["bytes_sent"]) for r in rows) / len(rows)
    dense = sum(int(r["bytes_uncompressed"]) for r in rows) / len(rows)
    first = (
        int(r["round"])
        if (r := next((r for r in rows if float(r["accuracy"]) >= 0.95), None))
        else "-"
    )
    return [
        name,
        f"{metrics['test/acc']:.4f}",
        first,
        f"{seconds:.0f}",
        f"{sent / 1e6:.2f}",
        f"{1 - sent / dense:.0%}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--only", default=",".join(SETTINGS))
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="litlab_fed_bench_"))
    rows = []
    for name in args.only.split(","):
        rows.append(run(name, args.rounds, out))
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    print(
        table(
            [
                "setting",
                "final test acc",
                "first round >= 95%",
                "wall s (whole command)",
                "MB sent / round",
                "fewer bytes",
            ],
            rows,
        )
    )
    print(f"run dirs: {out}")


if __name__ == "__main__":
    main()
