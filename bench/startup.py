"""Entry-point start-up vs `python -c "import torch"` (bar: <= 1.3x).

    .venv/bin/python bench/startup.py [--repeat 7]

`--help` and `--cfg job` never import torch: Hydra parses the command line first, and the
heavy imports happen inside the task. Runs are interleaved so machine noise hits all alike.
"""

import argparse

from common import PY, median, table, time_command

COMMANDS = {
    'python -c "import torch"': [PY, "-c", "import torch"],
    "python src/train.py --help": [PY, "src/train.py", "--help"],
    "python src/train.py --cfg job": [PY, "src/train.py", "--cfg", "job"],
    "python src/eval.py --help": [PY, "src/eval.py", "--help"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    times = {name: [] for name in COMMANDS}
    for _ in range(args.repeat):
        for name, cmd in COMMANDS.items():
            times[name].append(time_command(cmd)[0])
    base = median(times['python -c "import torch"'])
    rows = [
        [f"`{name}`", f"{median(t):.2f}", f"{median(t) / base:.2f}x"] for name, t in times.items()
    ]
    print(table(["command", "median wall (s)", "vs import torch"], rows))
    worst = max(median(t) / base for name, t in times.items() if "src/" in name)
    print(f"\nworst ratio {worst:.2f}x (bar 1.3x): {'PASS' if worst <= 1.3 else 'FAIL'}")


if __name__ == "__main__":
    main()
