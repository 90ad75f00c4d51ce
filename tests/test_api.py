"""The Python API (`from litlab import train`) is the command line in-process: same configs,
same run dir, same numbers, same one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.runs import QUIET, ROOT, results, run_dirs, run_in_process

TINY = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.log_every_n_steps=2",
    "seed=3",
    *QUIET,
]


def test_importing_litlab_is_cheap_and_lazy():
    """`from litlab import train` must not import torch/lightning (notebooks, --help)."""
    code = (
        "import sys; from litlab import train, evaluate; "
        "print(callable(train), callable(evaluate), 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src")},
        check=True,
    )
    assert out.stdout.split() == ["True", "True", "False"]


def test_train_from_python_equals_the_cli(cli, tmp_path):
    """Same overrides and seed: the same test/acc, the same run dir layout and files."""
    from litlab import evaluate, train

    proc = cli("train.py", *TINY)
    cli_metrics = results(proc.stdout)[0]
    result = train([*TINY, f"paths.log_dir={tmp_path / 'api'}"])
    assert result.metrics["test/acc"] == pytest.approx(cli_metrics["test/acc"], abs=1e-4)
    assert result.run_dir.parent == tmp_path / "api" / "train" / "runs"
    assert result.best_checkpoint.startswith(str(result.run_dir / "checkpoints" / "epoch_"))
    cli_dir = run_dirs(tmp_path / "logs")[0]
    for name in (
        ".hydra/config.yaml",
        ".hydra/overrides.yaml",
        "train.log",
        "metrics.json",
        "csv/metrics.csv",
    ):
        assert (cli_dir / name).is_file() and (result.run_dir / name).is_file(), name
    saved = json.loads((result.run_dir / "metrics.json").read_text())
    assert saved["test/acc"] == pytest.approx(result.metrics["test/acc"])
    # the best checkpoint alone rebuilds the run: evaluate() gives the same test/acc
    evaluated = evaluate(
        [
            f"ckpt_path={result.best_checkpoint}",
            "extras.print_config=false",
            f"paths.log_dir={tmp_path / 'api'}",
        ]
    )
    assert evaluated.metrics["test/acc"] == pytest.approx(result.metrics["test/acc"], abs=1e-4)
    assert (evaluated.run_dir / "predictions.csv").is_file()


@pytest.mark.parametrize(
    "override", ["data=mnits", "trainer.max_epoch=3", "trainer.max_epochs=abc"]
)
def test_bad_override_raises_the_cli_line(override, tmp_path, capfd):
    """Hydra's composition errors and litlab's checks: UserError carrying the CLI's line, and
    no run dir left behind. The CLI's line comes from train.py's real `cli.run(main)` in this
    worker (a subprocess would add only its imports; test_bad_inputs runs train.py's
    refusals in new interpreters)."""
    from litlab import train
    from litlab.errors import UserError

    code, err_text = run_in_process("train.py", [override], tmp_path / "logs", capfd)
    assert code == 2
    line = err_text.strip().splitlines()[-1]
    with pytest.raises(UserError) as err:
        train([override, f"paths.log_dir={tmp_path / 'api'}"])
    assert f"error: {err.value}" == line
    assert not list((tmp_path / "api").glob("train/runs/*"))


@pytest.mark.parametrize("wrote_checkpoint", [True, False])
def test_an_error_keeps_the_run_dir_once_it_holds_a_checkpoint(tmp_path, wrote_checkpoint):
    """`litlab.api.run` decides as the CLI does, when the error happens: a recipe that wrote a
    checkpoint before its error leaves the run dir (marked failed) and the error names the
    resume, with the call's overrides; one that wrote none leaves no run dir."""
    import shlex

    from litlab.api import run
    from litlab.errors import UserError

    def recipe(cfg):
        out = Path(cfg.paths.output_dir)
        if wrote_checkpoint:
            (out / "checkpoints").mkdir()
            (out / "checkpoints" / "last.ckpt").write_bytes(b"x")
        raise UserError("cannot read image /data/cat/1.png: gone; fix or remove the file")

    overrides = [f"paths.log_dir={tmp_path / 'api'}", "seed=3", *QUIET]
    with pytest.raises(UserError) as err:
        run("train", overrides, recipe)
    runs = run_dirs(tmp_path / "api")
    if not wrote_checkpoint:
        assert runs == [] and "resume" not in str(err.value)
        return
    [out] = runs
    assert (out / "failed.json").is_file() and (out / "checkpoints" / "last.ckpt").is_file()
    line, command = str(err.value).split("; resume: ")
    assert line == "cannot read image /data/cat/1.png: gone; fix or remove the file"
    assert shlex.split(command) == ["python", "src/train.py", *overrides, f"ckpt_path={out}"]
