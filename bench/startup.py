"""Entry-point start-up vs `python -c "import torch"` (bar: <= 1.3x), and the refusals of
common mistakes (issue 50; bar: <= 1.5 s, exit 2, one line).

    .venv/bin/python bench/startup.py [--repeat 7]

`--help` and `--cfg job` never import torch: Hydra parses the command line first, and the
heavy imports happen inside the task. A mistake the command line shows (a model that does not
fit the data, a word for a number, a GPU where none can be, fp16 on a CPU, a checkpoint path
to nothing) is refused before torch is imported. Runs are interleaved so machine noise hits
all alike.
"""

import argparse
import resource

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
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
