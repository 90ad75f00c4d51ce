"""Errors Hydra raises before a run starts, as one line (litlab.cli, litlab.config.compose): a
line of Hydra's that holds the error and ends with its advice ("..., set env var
HYDRA_FULL_ERROR=1 to see chained exception.") was dropped whole as advice, and the user read
`error: ` and nothing else."""

import sys

from helpers.here import run_here

from litlab.config import compose


def test_a_target_hydra_cannot_import_is_named_in_the_one_line(tmp_path, capfd):
    logs = tmp_path / "logs"
    cmd = [
        sys.executable,
        "src/train.py",
        "+hydra.callbacks.x._target_=nope.X",
        f"paths.log_dir={logs}",
    ]
    proc = run_here(cmd, capfd)
    assert proc.returncode == 2
    example = "(e.g. lightning.pytorch.callbacks.ModelCheckpoint)"
    assert proc.stderr.strip().splitlines() == [
        f"error: _target_ 'nope.X' cannot be imported; valid: the dotted path of a class or function {example}"
    ]
    assert proc.stdout.strip() == "" and not logs.exists()


def test_hydra_s_advice_is_dropped_and_its_error_kept():
    chained = "Boom in 'x', set env var HYDRA_FULL_ERROR=1 to see chained exception.\n"
    advice = "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    assert compose.condense(chained + advice) == "Boom in 'x'"
    # nothing left to say: a line that says so, never an empty `error: `
    line = compose.composition_error(advice, "train", [])
    assert line.startswith("the command stopped before its run started without saying why")
