"""`uv pip install ARGS` into this Python's environment, from the package sources pip is
configured with here: make's set-up installs the lock with it (several packages at once,
bytecode compiled on every core).

uv does not read pip's configuration: where pip is pointed at a mirror, a local index or a
folder of wheels (pip.conf, PIP_* variables), uv gets the same places, so both install the same
files; with nothing configured, PyPI, as for pip. The places go to uv's environment, not its
command line, so that make's echo of the command never shows an index's credentials."""

import os
import shlex
import subprocess
import sys

UV_VARIABLES = {  # pip's setting -> uv's variable
    "index-url": "UV_DEFAULT_INDEX",
    "extra-index-url": "UV_INDEX",  # space-separated
    "find-links": "UV_FIND_LINKS",  # comma-separated
}


def sources() -> dict[str, str]:
    """uv's variables for the places `pip config list` names, each place once (pip.conf and a
    PIP_ variable may both set one)."""
    pip = [sys.executable, "-m", "pip", "config", "list"]
    listed = subprocess.run(pip, check=False, capture_output=True, text=True).stdout
    places: dict[str, list[str]] = {}
    for line in listed.splitlines():  # e.g. global.extra-index-url='file:///a file:///b'
        key, _, value = line.partition("=")
        variable = UV_VARIABLES.get(key.rpartition(".")[2])
        if variable is None or not value:
            continue
        seen = places.setdefault(variable, [])
        seen += [p for p in shlex.split(value)[0].split() if p not in seen]
    return {v: ("," if v == "UV_FIND_LINKS" else " ").join(p) for v, p in places.items()}


def main(args: list[str]) -> int:
    uv = [sys.executable, "-m", "uv", "pip", "install", "--python", sys.executable]
    uv += ["--index-strategy", "unsafe-best-match", "--compile-bytecode"]
    return subprocess.run([*uv, *args], check=False, env={**os.environ, **sources()}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
