"""A command line as a subprocess test builds it (`[python, src/<script>, args...]`), run in
this process instead, through the script's real `cli.run` (argv and all: `command_in_process`):
for the runs of a test whose process is not what it checks (a resume to the end, a reference
run), which then skip a new interpreter's imports of torch and Lightning (~5 CPU s each)."""

import subprocess
from pathlib import Path

from helpers.runs import command_in_process


def run_here(cmd: list[str], capfd=None) -> subprocess.CompletedProcess:
    """`cmd` run to its end here: returncode (SystemExit's code), stdout and stderr as `capfd`
    reads them ('' without it). Its words are kept, none added (`paths.log_dir=` among them);
    only their order changes: flags first, then the log dir, then the rest in order."""
    script, words = Path(cmd[1]).name, [str(w) for w in cmd[2:]]
    [log_dir] = [w.split("=", 1)[1] for w in words if w.startswith("paths.log_dir=")]
    flags = tuple(w for w in words if w.startswith("-"))
    rest = [w for w in words if not w.startswith(("-", "paths.log_dir="))]
    code, out, err = command_in_process(script, rest, log_dir, capfd, quiet=False, flags=flags)
    return subprocess.CompletedProcess(cmd, code, out, err)
