"""Run by Python at the start of every process Ray starts for a federated run: this folder
leads their PYTHONPATH (`processes.init_ray`). Each of them (Ray's monitor, dashboard, log
monitor and agents, and every worker: six or more to a start) imports ray, which imports
jsonschema, whose IRI grammar (rfc3987-syntax) then costs ~1.8 s of CPU; `import litlab`
defers it (`litlab.compat.rfc3987`): a Ray start took 4.3 s instead of 11.0 s here. Then the
sitecustomize this one hides, if there is one further on the path, runs as it would have."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    import litlab  # noqa: F401  (its import defers the grammar)
except ImportError:  # a process without litlab on its path: it only starts slower
    pass


def _run_the_hidden_one() -> None:
    # every spelling of this folder (a link to it too) is left out, or this file runs itself
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_run_the_hidden_one()
