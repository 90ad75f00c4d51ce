"""`ckpt_path=last` and `ckpt_path=<run dir>`: resume a run inside its own run dir.

Hydra picks the output dir before the task starts, so the choice is made on the command line:
`translate` (called by `cli.run` before Hydra parses argv) rewrites

    ckpt_path=last        -> the newest logs/<task_name>/runs/* holding checkpoints/last.ckpt
    ckpt_path=<run dir>   -> that run

into `ckpt_path=<run>/checkpoints/last.ckpt hydra.run.dir=<run>`, so CSV, TensorBoard, the
log file and new checkpoints continue in the same folder. The resumed run's config is saved in
`.hydra/resume-<time>/` (the original `.hydra/config.yaml` is kept). A checkpoint *file* keeps
Lightning's meaning: resume from it in a new run dir. Hydra and omegaconf only (cheap).
"""

import time
from pathlib import Path

from litlab.errors import UserError

LAST = "last"
RESUMABLE_CONFIGS = ("train", "compress")


def checkpoint_of(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "last.ckpt"


def latest_run(log_dir: Path, task_name: str) -> Path | None:
    """The newest run dir (timestamps sort) of the task that holds a last.ckpt."""
    runs = sorted(
        p for p in (Path(log_dir) / task_name / "runs").glob("*") if checkpoint_of(p).is_file()
    )
    return runs[-1] if runs else None


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def translate(argv: list[str], config_name: str) -> list[str]:
    """argv with `ckpt_path=last|<run dir>` turned into a checkpoint file and the run's dir."""
    args = argv[1:]
    given = [i for i, a in enumerate(args) if a.startswith("ckpt_path=")]
    multirun = any(a in ("-m", "--multirun") for a in args)
    if config_name not in RESUMABLE_CONFIGS or not given:
        return argv
    value = args[given[-1]].split("=", 1)[1].strip("'\"")
    if multirun:
        if value == LAST or Path(value).is_dir():
            raise UserError(
                f"ckpt_path={value} cannot be used with -m: every job of a sweep "
                f"would resume the same run; resume each job on its own "
                f"(python src/train.py ckpt_path=<its run dir>), or pass a .ckpt file"
            )
        return argv
    if value == LAST:
        rest = [a for a in args if not a.startswith(("-", "ckpt_path=", "hydra."))]
        try:
            from litlab.config.compose import compose

            cfg = compose(config_name, rest)
            log_dir, task = Path(cfg.paths.log_dir), str(cfg.task_name)
        except Exception:  # a bad override: let Hydra report it in its own words
            return argv
        run = latest_run(log_dir, task)
        if run is None:
            raise UserError(
                f"ckpt_path=last: no run of task '{task}' with checkpoints/last.ckpt "
                f"in {log_dir / task / 'runs'}; pass ckpt_path=<run dir or .ckpt file>"
            )
    elif Path(value).is_dir():
        run = Path(value).resolve()
        if not checkpoint_of(run).is_file():
            raise UserError(
                f"ckpt_path={value} is a folder without checkpoints/last.ckpt; "
                f"pass a run dir of train.py or a .ckpt file"
            )
    else:
        return argv
    args = [a for i, a in enumerate(args) if i not in given]
    args.append(f"ckpt_path={_quote(str(checkpoint_of(run)))}")
    if not any(a.startswith("hydra.run.dir=") for a in args):
        args.append(f"hydra.run.dir={_quote(str(run))}")
    if not any(a.startswith("hydra.output_subdir=") for a in args):
        args.append(f"hydra.output_subdir=.hydra/resume-{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    print(f"resuming {run} from {checkpoint_of(run).name}", flush=True)
    return argv[:1] + args
