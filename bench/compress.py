"""Compression on real MNIST: distillation, structured pruning and int8 against a ResNet-18.

    OMP_NUM_THREADS=1 python bench/compress.py --data-dir /tmp/mnist_copy --out logs/bench_compress

`--data-dir` holds MNIST/raw (a copy of ../shared/data/MNIST: only the 10k test split, which
`data=mnist` splits into train/val/test). Every stage is a user command (train.py,
compress.py) with its run dir under `--out`; a stage whose result is there is not rerun, so an
interrupted bench continues. Prints the table for BENCHMARKS.md and writes `<out>/bench.json`.
Bars: distilled student <= 10% of the teacher's parameters, >= 95% of its accuracy and above
the same student trained alone; pruned ResNet-18 <= 10% parameters, >= 95% accuracy, faster at
batch 64; int8 within 1 point of fp32 and <= 0.3x its file.
"""

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, table, time_command

MNIST = [
    "data=mnist",
    "data.download=false",
    "data.num_workers=0",
    "trainer.accelerator=cpu",
    "extras.print_config=false",
    "callbacks.rich_progress_bar=null",
    "seed=42",
]


def train(run: Path, data_dir: str, *overrides: str) -> Path:
    if not (run / "metrics.json").is_file():
        print("running", run.name, flush=True)
        time_command(
            [
                sys.executable,
                "src/train.py",
                *MNIST,
                f"data.data_dir={data_dir}",
                *overrides,
                f"hydra.run.dir={run}",
            ]
        )
    return next((run / "checkpoints").glob("epoch_*.ckpt"))  # the best (save_top_k: 1)


def compress(run: Path, ckpt: Path, *overrides: str) -> dict:
    if not (run / "compress_report.md").is_file() or not (run / "done").is_file():
        print("running", run.name, flush=True)
        time_command(
            [
                sys.executable,
                "src/compress.py",
                f"ckpt_path={ckpt}",
                "extras.print_config=false",
                "callbacks.rich_progress_bar=null",
                *overrides,
                f"hydra.run.dir={run}",
            ]
        )
        (run / "done").write_text("")
    return {s["stage"]: s for s in json.loads((run / "compress_report.json").read_text())["stages"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", default=str(ROOT / "logs" / "bench_compress"))
    p.add_argument("--teacher-epochs", type=int, default=8)
    p.add_argument("--student-epochs", type=int, default=8)
    p.add_argument("--finetune-epochs", type=int, default=4)
    p.add_argument("--student-channels", default="[16,32,64]")
    p.add_argument("--teacher", help="an existing teacher checkpoint (skips its training)")
    p.add_argument("--jobs", type=int, default=1, help="compress runs at once (latency suffers)")
    a = p.parse_args()
    out = Path(a.out).resolve()
    teacher = (
        Path(a.teacher).resolve()
        if a.teacher
        else train(
            out / "teacher",
            a.data_dir,
            "model=resnet18",
            "model.net.small_input=false",
            f"trainer.max_epochs={a.teacher_epochs}",
        )
    )
    student = [f"model.net.channels={a.student_channels}", f"trainer.max_epochs={a.student_epochs}"]
    alone = json.loads(
        (
            train(out / "student_alone", a.data_dir, "model=cnn", *student).parents[1]
            / "metrics.json"
        ).read_text()
    )
    runs = {
        "distill": [
            "compress=distill",
            "report.onnx=false",
            f"compress.distill.student.net.channels={a.student_channels}",
            f"trainer.max_epochs={a.student_epochs}",
        ],
        "prune": [
            "compress=prune",
            "compress.prune.ratio=0.1",
            f"trainer.max_epochs={a.finetune_epochs}",
        ],
        "quantize": ["compress=quantize"],
    }
    with ThreadPoolExecutor(a.jobs) as pool:
        futures = {k: pool.submit(compress, out / k, teacher, *v) for k, v in runs.items()}
    d, pr, q = (futures[k].result() for k in ("distill", "prune", "quantize"))
    t = q["original"]
    rows, checks = [], {}
    for name, s in [
        ("ResNet-18 teacher (fp32)", t),
        ("teacher int8 (ORT QDQ)", q["quantize"]),
        ("ResNet-18 pruned + fine-tuned", pr["prune"]),
        ("student distilled", d["distill"]),
    ]:
        rows.append(
            [
                name,
                f"{s['params']:,}",
                f"{s['params'] / t['params']:.1%}",
                s["checkpoint_mb"] or "n/a",
                s["onnx_mb"] or "n/a",
                f"{s['test/acc']:.4f}",
                f"{s['test/acc'] / t['test/acc']:.1%}",
                s.get("latency_ms_eager_b64", "n/a"),
                s.get("latency_ms_onnx_b64", "n/a"),
            ]
        )
    rows.append(
        [
            "student alone (no teacher)",
            f"{d['distill']['params']:,}",
            f"{d['distill']['params'] / t['params']:.1%}",
            "",
            "",
            f"{alone['test/acc']:.4f}",
            f"{alone['test/acc'] / t['test/acc']:.1%}",
            "",
            "",
        ]
    )
    acc = t["test/acc"]
    checks = {
        "distill_params<=10%": d["distill"]["params"] <= 0.1 * t["params"],
        "distill_acc>=95%": d["distill"]["test/acc"] >= 0.95 * acc,
        "distill>alone": d["distill"]["test/acc"] > alone["test/acc"],
        "prune_params<=10%": pr["prune"]["params"] <= 0.1 * t["params"],
        "prune_acc>=95%": pr["prune"]["test/acc"] >= 0.95 * acc,
        "prune_b64_eager_faster": pr["prune"]["latency_ms_eager_b64"] < t["latency_ms_eager_b64"],
        "int8_within_1pt": acc - q["quantize"]["test/acc"] <= 0.01,
        "int8_file<=0.3x": q["quantize"]["onnx_mb"] <= 0.3 * t["onnx_mb"],
    }
    print(
        table(
            [
                "model",
                "params",
                "share",
                "ckpt MB",
                "ONNX MB",
                "test acc",
                "vs teacher",
                "eager b64 ms",
                "ORT b64 ms",
            ],
            rows,
        )
    )
    print(json.dumps(checks, indent=2))
    (out / "bench.json").write_text(json.dumps({"rows": rows, "checks": checks}, indent=2))


if __name__ == "__main__":
    main()
