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
from litlab.recipes.result import RunResult


def _run(config_name: str, overrides: Sequence[str], recipe) -> RunResult:
    from hydra.errors import HydraException

    from litlab import console, environment, threads
    from litlab.config.compose import compose
    from litlab.config.hydra_errors import composition_error
    from litlab.recipes import run_dir
    from litlab.utils.distributed import is_rank_zero

    environment.load_dotenv_files()  # as `cli.run` does
    try:
        cfg = compose(config_name, overrides)
    except (HydraException, ValueError) as err:
        raise UserError(composition_error(str(err), config_name, list(overrides))) from None
    task_cfg = run_dir.start(cfg, config_name)
    console.setup(console.verbose_requested())  # as `cli.task` does
    out = cfg.hydra.runtime.output_dir
    fresh = run_dir.only_hydra_files(out) and is_rank_zero()
    try:
        threads.apply(task_cfg)  # as `cli.task` does
        return recipe(task_cfg)
    except UserError:
        if fresh:
            run_dir.remove(out)
        raise


def train(overrides: Sequence[str] = ()) -> RunResult:
    """Train and test as `python src/train.py *overrides` does; returns metrics, run dir and
    the best checkpoint."""
    from litlab.recipes.train import train as recipe

    return _run("train", overrides, recipe)


def evaluate(overrides: Sequence[str] = ()) -> RunResult:
    """Test a checkpoint as `python src/eval.py ckpt_path=PATH *overrides` does."""
    from litlab.recipes.evaluate import evaluate as recipe

    return _run("eval", overrides, recipe)
