"""The default job under different CPU thread settings, with and without busy loops beside it.

    .venv/bin/python bench/threads.py                   # no extra load, then 2 busy loops
    .venv/bin/python bench/threads.py --busy 0 1 --epochs 5

For each load condition (N busy `while True: pass` processes started --warmup seconds before,
so that the 1-minute load average `threads=auto` reads has risen), runs `python src/train.py`
with each thread setting, interleaved, and prints wall time, test accuracy, the thread count
the run used and the load average before it. The figures are in BENCHMARKS.md ("Threads").
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from common import PY, ROOT, table, time_command

# name -> (train.py override, extra environment); OMP_NUM_THREADS is removed for all of them
SETTINGS = {
    "torch default": ("threads=null", {}),
    "2 threads, passive wait": ("threads=2", {}),
    "1 thread": ("threads=1", {}),
    "torch default, passive wait": ("threads=null", {"OMP_WAIT_POLICY": "PASSIVE"}),
    "auto (litlab default)": ("threads=auto", {}),
}


def run(setting: str, epochs: int | None, log_dir: str) -> tuple[float, float, str]:
    override, extra = SETTINGS[setting]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(extra)
    cmd = [PY, "src/train.py", override, f"paths.log_dir={log_dir}"]
    cmd += [f"trainer.max_epochs={epochs}"] if epochs else []
    wall, proc = time_command(cmd, env=env)
    acc = float(
        next(ln.split()[-1] for ln in proc.stdout.splitlines() if ln.strip().startswith("test/acc"))
    )
    used = next(
        (ln.split()[1] for ln in proc.stdout.splitlines() if ln.strip().startswith("threads ")), "?"
    )
    return wall, acc, used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--busy",
        type=int,
        nargs="+",
        default=[0, 2],
        help="load conditions: number of busy loops beside the runs",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        nargs="+",
        default=[0, 5],
        help="trainer.max_epochs per run; 0 = the config's (30)",
    )
    parser.add_argument("--warmup", type=float, default=45.0)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for busy in args.busy:
            loops = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)
            ]
            try:
                time.sleep(args.warmup if busy else 0)
                for epochs in args.epochs:
                    for setting in args.settings:
                        load = os.getloadavg()[0]
                        wall, acc, used = run(setting, epochs or None, tmp)
                        rows.append(
                            [
                                busy,
                                epochs or 30,
                                setting,
                                used,
                                f"{load:.2f}",
                                f"{wall:.1f}",
                                f"{100 * acc:.2f}%",
                            ]
                        )
                        print(" | ".join(str(c) for c in rows[-1]), flush=True)
            finally:
                for loop in loops:
                    loop.kill()
                    loop.wait()
    print(
        table(
            ["busy loops", "epochs", "setting", "threads", "load before", "wall (s)", "test acc"],
            rows,
        )
    )
    print(f"\n{len(os.sched_getaffinity(0))} cores; run from {ROOT}")


if __name__ == "__main__":
    main()
