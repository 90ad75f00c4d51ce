"""Entry-point start-up vs `python -c "import torch"` (bar: <= 1.3x), and the refusals of
common mistakes (issue 50; bar: <= 1.5 s, exit 2, one line).

    .venv/bin/python bench/startup.py [--repeat 7]
    .venv/bin/python bench/startup.py --collector [--repeat 3]   # BENCHMARKS.md "The garbage collector at start-up"

`--help` and `--cfg job` never import torch: Hydra parses the command line first, and the
heavy imports happen inside the task. A mistake the command line shows (a model that does not
fit the data, a word for a number, a GPU where none can be, fp16 on a CPU, a checkpoint path
to nothing) is refused before torch is imported. Runs are interleaved so machine noise hits
all alike.
"""

import argparse
import json
import resource
import subprocess

from common import PY, median, table, time_command

IMPORTS = {
    'python -c "import torch"': [PY, "-c", "import torch"],
    'python -c "import torch, lightning"': [PY, "-c", "import torch, lightning"],
}
COMMANDS = {
    "python src/train.py --help": [PY, "src/train.py", "--help"],
    "python src/train.py --cfg job": [PY, "src/train.py", "--cfg", "job"],
    "python src/eval.py --help": [PY, "src/eval.py", "--help"],
}
#: issue 50's six mistakes: each exits 2 with one line
REFUSALS = [
    ["src/train.py", "model=gnn", "data=digits"],
    ["src/train.py", "data=cora", "data.data_dir=/nonexistent"],
    ["src/train.py", "model.optimizer.lr=fast"],
    ["src/train.py", "trainer=gpu"],
    ["src/train.py", "trainer.precision=16-mixed"],
    ["src/eval.py", "ckpt_path=/nonexistent/x.ckpt"],
]
REFUSAL_BAR_S = 1.5


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _refused(args: list[str]) -> tuple[float, float]:
    """(wall, CPU seconds) of a command that must exit 2 with one line: the CPU time (user +
    sys) is what a busy machine inflates least."""
    before = _cpu()
    wall, proc = time_command([PY, *args], expect=2)
    if len(proc.stderr.strip().splitlines()) != 1:
        raise SystemExit(f"{' '.join(args)}: not one line:\n{proc.stderr[-2000:]}")
    return wall, _cpu() - before


#: what every training command imports, timed in a fresh interpreter with the collector's
#: thresholds given (`gc.callbacks` count each collection and its time)
COLLECTOR_PROBE = """
import gc, json, sys, time
gc.set_threshold(*json.loads(sys.argv[1]))
seen = {"n": [0, 0, 0], "s": 0.0, "t": 0.0}
def watch(phase, info):
    if phase == "start":
        seen["t"] = time.perf_counter()
    else:
        seen["n"][info["generation"]] += 1
        seen["s"] += time.perf_counter() - seen["t"]
gc.callbacks.append(watch)
cpu = time.process_time()
import torch, lightning.pytorch, torchvision, sklearn.model_selection, hydra, omegaconf
print(json.dumps({"cpu": time.process_time() - cpu, "gc": seen["s"], "n": seen["n"]}))
"""


def collector(repeat: int) -> None:
    """Python's default thresholds against an entry point's (`litlab.cli.GC_THRESHOLDS`),
    interleaved: CPU seconds of the imports, seconds in the collector, collections."""
    from litlab.cli import GC_THRESHOLDS

    settings = {"Python's default (700, 10, 10)": (700, 10, 10)}
    settings[f"litlab's entry points {tuple(GC_THRESHOLDS)}"] = GC_THRESHOLDS
    runs = {name: [] for name in settings}
    for _ in range(repeat):
        for name, thresholds in settings.items():
            cmd = [PY, "-c", COLLECTOR_PROBE, json.dumps(list(thresholds))]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout))
    rows = [
        [
            name,
            f"{median(r['cpu'] for r in got):.2f}",
            f"{median(r['gc'] for r in got):.2f}",
            " / ".join(str(int(median(r["n"][g] for r in got))) for g in range(3)),
        ]
        for name, got in runs.items()
    ]
    heads = ["thresholds", "CPU of the imports (s)", "in the collector (s)", "collections"]
    print(table(heads, rows))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--collector", action="store_true", help="the collector at start-up")
    args = parser.parse_args()
    if args.collector:
        return collector(args.repeat)
    times = {name: [] for name in [*IMPORTS, *COMMANDS]}
    refusals = {"python " + " ".join(a): [] for a in REFUSALS}
    for _ in range(args.repeat):
        for name, cmd in {**IMPORTS, **COMMANDS}.items():
            times[name].append(time_command(cmd)[0])
        for name, cmd in zip(refusals, REFUSALS, strict=True):
            refusals[name].append(_refused(cmd))
    base = median(times['python -c "import torch"'])
    rows = [
        [f"`{name}`", f"{median(t):.2f}", f"{median(t) / base:.2f}x"] for name, t in times.items()
    ]
    print(table(["command", "median wall (s)", "vs import torch"], rows))
    worst = max(median(times[name]) / base for name in COMMANDS)
    print(f"\nworst ratio {worst:.2f}x (bar 1.3x): {'PASS' if worst <= 1.3 else 'FAIL'}\n")
    rows = [
        [f"`{name}`", "2", f"{median(w for w, _ in t):.2f}", f"{median(c for _, c in t):.2f}"]
        for name, t in refusals.items()
    ]
    print(table(["refused command", "exit", "median wall (s)", "median CPU (s)"], rows))
    slowest = max(median(w for w, _ in t) for t in refusals.values())
    verdict = "PASS" if slowest <= REFUSAL_BAR_S else "FAIL"
    print(f"\nslowest refusal {slowest:.2f} s (bar {REFUSAL_BAR_S} s): {verdict}")


if __name__ == "__main__":
    main()
