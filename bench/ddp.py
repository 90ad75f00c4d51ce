"""2-process CPU DDP against 1 process on the same job (whole-run wall time), and an exit
stress test: N short DDP runs, each must exit 0 with no `terminate called` and no traceback.

    python bench/ddp.py                    # timing: 3 x (1 process, trainer=ddp), medians, ratio
    python bench/ddp.py --stress 20        # 20 short DDP runs: prints the failures (bar: 0)
    python bench/ddp.py --repeats 5 -- trainer.max_epochs=10   # extra overrides after --

Each run is `python src/train.py ...` in a subprocess, as a user types it, logs in a temp dir.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null", "logger=csv"]
# the timed job: the default digits run, a fixed number of epochs (no early stop)
JOB = ["trainer.max_epochs=10", "callbacks.early_stopping=null"]
# a stress run: as short as a real run gets (fit, validate, test, exit)
SHORT = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.num_sanity_val_steps=0",
]
BAD_SIGNS = ("terminate called", "Traceback", "core dumped", "Aborted")


def run(overrides: list[str], log_dir: str) -> tuple[float, subprocess.CompletedProcess]:
    cmd = [
        sys.executable,
        str(ROOT / "src" / "train.py"),
        f"paths.log_dir={log_dir}",
        *QUIET,
        *overrides,
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - start, proc


def failure(proc: subprocess.CompletedProcess) -> str | None:
    text = proc.stdout + proc.stderr
    sign = next((s for s in BAD_SIGNS if s in text), None)
    if proc.returncode != 0 or sign:
        return f"exit {proc.returncode}" + (f", '{sign}'" if sign else "")
    return None


def timing(repeats: int, extra: list[str]) -> None:
    times = {"1 process": [], "trainer=ddp (2 processes)": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):  # interleaved, so load changes hit both alike
            for name, more in (("1 process", []), ("trainer=ddp (2 processes)", ["trainer=ddp"])):
                seconds, proc = run(JOB + more + extra, tmp)
                if why := failure(proc):
                    sys.exit(f"{name} failed ({why}):\n{proc.stderr[-3000:]}")
                times[name].append(seconds)
                print(f"  run {i + 1} {name:<26} {seconds:6.1f} s", flush=True)
    single, ddp = (statistics.median(t) for t in times.values())
    print("\n| job | median wall time (s) |\n|---|---|")
    for name, t in times.items():
        print(f"| {name} | {statistics.median(t):.1f} |")
    verdict = "ok" if ddp / single <= 1.4 else "over the 1.4x bar"
    print(
        f"\nratio ddp / 1 process: {ddp / single:.2f}x ({verdict}); {repeats} runs each, "
        f"overrides: {' '.join(JOB + extra)}"
    )


def stress(n: int, extra: list[str]) -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            seconds, proc = run(["trainer=ddp", *SHORT, *extra], tmp)
            why = failure(proc)
            failures += why is not None
            print(f"  run {i + 1:2d}/{n}: {why or 'ok'} ({seconds:.1f} s)", flush=True)
            if why:
                print("    " + "\n    ".join((proc.stderr or proc.stdout).splitlines()[-6:]))
    print(f"\nexit stress: {failures} failures in {n} DDP runs")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per setting")
    parser.add_argument("--stress", type=int, default=0, help="run N short DDP runs instead")
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides (after --)")
    args = parser.parse_args()
    if args.stress:
        sys.exit(1 if stress(args.stress, args.overrides) else 0)
    timing(args.repeats, args.overrides)


if __name__ == "__main__":
    main()
