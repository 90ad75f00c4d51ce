"""Print uv's flags for the package sources pip is configured with on this machine.

`make`'s set-up installs the lock with uv (several packages at once, bytecode compiled on
every core), which does not read pip's configuration: where pip is pointed at a mirror, a
local index or a folder of wheels (pip.conf, PIP_* variables), uv gets the same places, so
both install the same files. With nothing configured this prints nothing: PyPI, as for pip."""

import shlex
import subprocess
import sys

FLAGS = {key: f"--{key}" for key in ("index-url", "extra-index-url", "find-links")}


def main() -> None:
    pip = [sys.executable, "-m", "pip", "config", "list"]
    listed = subprocess.run(pip, check=False, capture_output=True, text=True).stdout
    flags: list[str] = []
    for line in listed.splitlines():  # e.g. global.extra-index-url='file:///a file:///b'
        key, _, value = line.partition("=")
        flag = FLAGS.get(key.rpartition(".")[2])
        if flag is None:
            continue
        for place in shlex.split(value)[0].split() if value else []:
            if place not in flags:  # a place set both in pip.conf and in PIP_*
                flags += [flag, place]
    print(shlex.join(flags))


if __name__ == "__main__":
    main()
