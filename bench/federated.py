"""Federated bars (docs/federated.md): digits, and GIN on PROTEINS beside central training.

    OMP_NUM_THREADS=1 .venv/bin/python bench/federated.py [--rounds 20] [--only dirichlet,iid]
    OMP_NUM_THREADS=1 .venv/bin/python bench/federated.py --only proteins_dirichlet,proteins_iid,proteins_central

Runs `python src/federate.py` once per setting (a fresh process each: Ray included; 10 clients,
the defaults otherwise: local_epochs=auto is 1 for digits, 5 for graphs) and prints a Markdown
table for BENCHMARKS.md. Bars: digits Dirichlet(0.5) global test accuracy >= 95% within 3
minutes on 2 cores; IID >= 98%; int8 / top-k updates send >= 60% fewer bytes per round with
accuracy within 1 point of the uncompressed Dirichlet run. PROTEINS (fold 0 of the seeded
10-fold split: one fixed test set of 112 graphs): Dirichlet(0.5) >= 0.68, IID >= 0.70, beside
`train.py` of the same model for as many epochs as rounds (`proteins_central`). PROTEINS is read
from a copy of --data (default ../shared/data/TUDataset).
"""

import argparse
import csv
import json
import shutil
import tempfile
from pathlib import Path

from common import PY, ROOT, table, time_command

GRAPH = ["data=proteins", "model=gin"]

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
    "proteins_dirichlet": [*GRAPH, "federate.partition=dirichlet", "federate.alpha=0.5"],
    "proteins_iid": [*GRAPH, "federate.partition=iid"],
}


def central(rounds: int, out: Path, data_dir: Path) -> list:
    """train.py on the same model and split, one epoch per federated round."""
    cmd = [
        PY,
        "src/train.py",
        *GRAPH,
        f"data.data_dir={data_dir}",
        f"hydra.run.dir={out / 'central'}",
        "extras.print_config=false",
        f"trainer.max_epochs={rounds}",
        "logger=csv",
    ]
    seconds, _ = time_command(cmd)
    metrics = json.loads((out / "central" / "metrics.json").read_text())
    return [
        "proteins_central (train.py)",
        f"{metrics['test/acc']:.4f}",
        "-",
        "-",
        f"{seconds:.0f}",
        "-",
        "-",
    ]


def run(name: str, rounds: int, out: Path, data_dir: Path) -> list:
    cmd = [
        PY,
        "src/federate.py",
        f"hydra.run.dir={out / name}",
        "extras.print_config=false",
        "federate.num_clients=10",
        f"federate.rounds={rounds}",
        *SETTINGS[name],
        *([f"data.data_dir={data_dir}"] if name.startswith("proteins") else []),
    ]
    seconds, _ = time_command(cmd)
    metrics = json.loads((out / name / "metrics.json").read_text())
    with open(out / name / "history.csv") as f:
        rows = [r for r in csv.DictReader(f) if int(r["round"]) > 0]
    sent = sum(int(r["bytes_sent"]) for r in rows) / len(rows)
    dense = sum(int(r["bytes_uncompressed"]) for r in rows) / len(rows)
    bar = 0.68 if name.startswith("proteins") else 0.95
    first = (
        int(r["round"])
        if (r := next((r for r in rows if float(r["accuracy"]) >= bar), None))
        else "-"
    )
    last = rows[-1]
    clients = (
        f"{float(last['client_acc_mean']):.3f} / {float(last['client_acc_worst']):.3f}"
        if last.get("client_acc_mean")
        else "-"
    )
    return [
        name,
        f"{metrics['test/acc']:.4f}",
        clients,
        first,
        f"{seconds:.0f}",
        f"{sent / 1e6:.2f}",
        f"{1 - sent / dense:.0%}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--only", default="dirichlet,iid,int8,topk")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "TUDataset"))
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="litlab_fed_bench_"))
    data_dir = out / "data"
    if "proteins" in args.only:  # loaders write processed/ beside the raw files: a copy
        shutil.copytree(Path(args.data) / "PROTEINS_full", data_dir / "TUDataset" / "PROTEINS_full")
    rows = []
    for name in args.only.split(","):
        if name == "proteins_central":
            rows.append(central(args.rounds, out, data_dir))
        else:
            rows.append(run(name, args.rounds, out, data_dir))
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    print(
        table(
            [
                "setting",
                "final test acc",
                "clients' acc: mean / worst",
                "first round >= bar (digits 95%, PROTEINS 68%)",
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
