"""A report to look at: `python src/report.py path=<run dir or sweep dir>`.

Writes <path>/report.html, one self-contained page (no network needed to open it): for a run,
its learning curves, final metrics, inspect pictures, config and provenance; for a sweep, its
jobs, the objective per job, settings against the objective, Optuna's parameter importance
(a search) and the comparison of groups of replicas. A sweep writes its own at the end.
The recipe is `litlab.recipes.report` (docs/report.md).
"""

from omegaconf import DictConfig

from litlab import cli


@cli.main("report")
def main(cfg: DictConfig) -> None:
    from litlab.recipes import report

    report(cfg)


if __name__ == "__main__":
    cli.run_main(main)
