"""Small helpers shared by the benchmarks: timing commands, medians, Markdown output."""

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def time_command(
    cmd: list[str], *, expect: int = 0, **kwargs
) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time of `cmd` run from the repo root; it must exit with `expect` (2: a refusal)."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kwargs)
    elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return elapsed, proc


def median(values) -> float:
    return statistics.median(values)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def train_config(overrides: list[str], out: Path):
    """The train config as `python src/train.py overrides` composes it, run dir `out`."""
    from litlab.config.compose import compose

    return compose("train", overrides, output_dir=out)


def fit_template(cfg, callback) -> None:
    """Fit the template as train.py builds it from `cfg` (seed 0), with one extra callback."""
    import lightning as L

    from litlab.config import build

    L.seed_everything(0)
    dm = build.datamodule(cfg)
    model = build.model(cfg, dm)
    build.trainer(cfg, extra_callbacks=[callback]).fit(model, datamodule=dm)


def plain_trainer(epochs: int, callback, **kwargs):
    """Lightning's Trainer on the CPU with everything optional off: the floor of a template."""
    import lightning as L

    L.seed_everything(0)
    return L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )
