"""litlab from Python (notebooks, scripts, new entry points): the same configs, run dir and
one-line errors as the command line.

    from litlab import train, evaluate
    result = train(["model=gnn", "trainer.max_epochs=3"])   # as `python src/train.py ...`
    result.metrics["test/acc"], result.run_dir, result.best_checkpoint
    evaluate([f"ckpt_path={result.best_checkpoint}"])        # as `python src/eval.py ...`

Bad input raises `litlab.errors.UserError` with the line the CLI prints after `error: `.
"""

from collections.abc import Sequence

from litlab.errors import UserError
from litlab.runs.run_end import RunResult


def run(config_name: str, overrides: Sequence[str], recipe):
    """Any entry point's recipe as its command runs it: configs/<config_name>.yaml composed
    with `overrides`, a run dir made as Hydra makes it (removed again on bad input before it
    holds a checkpoint, else kept and marked failed: `runs.run_end`), threads applied; bad
    input raises `UserError` with the line the CLI prints.

        run("export", ["ckpt_path=..."], litlab.export.recipe.export)
    """
    from hydra.errors import HydraException

    from litlab import environment
    from litlab.config.compose import compose, composition_error
    from litlab.runs import run_dir, run_end

    environment.load_dotenv_files()  # as `cli.run_main` does
    try:
        cfg = compose(config_name, overrides)
    except (HydraException, ValueError) as err:
        raise UserError(composition_error(str(err), config_name, list(overrides))) from None
    task_cfg = run_dir.start(cfg, config_name)
    out = cfg.hydra.runtime.output_dir
    try:  # the same run as `cli.guard`'s; its errors raised, not printed
        return run_end.RunEnd(out, config_name, cfg.hydra.overrides.task).run(recipe, task_cfg)
    finally:
        run_dir.release_run_dir(out)


def train(overrides: Sequence[str] = ()) -> RunResult:
    """Train and test as `python src/train.py *overrides` does; returns metrics, run dir and
    the best checkpoint."""
    from litlab.recipes import train_and_test as recipe

    return run("train", overrides, recipe)


def evaluate(overrides: Sequence[str] = ()) -> RunResult:
    """Test a checkpoint as `python src/eval.py ckpt_path=PATH *overrides` does (or an
    exported file: `model_path=FILE.onnx`)."""
    from litlab.export.evaluate import evaluate_entry as recipe

    return run("eval", overrides, recipe)
