"""The CPU budget of `make test` (issue #49): the CPU seconds of every pytest process and of
the subprocesses they waited for (the entry points the checks run), summed over the xdist
workers. Wall time depends on the cores and on what else runs; CPU time moves less with the
load (a quarter more on a machine twice as busy) and grows when a check is added or slows
down, so that is what is budgeted. A whole default run over it fails, naming the figure and
the slowest checks, so that the next check added comes with a trim (a session fixture, an
in-process call) rather than a slower suite. LITLAB_TEST_BUDGET_S sets another figure (a
slower CPU than CI's); the 180 s wall goal on CI's 2 cores is about 360 CPU seconds.
"""

import json
import os
import resource
from pathlib import Path

# CPU seconds; raise it only with a measured reason in the commit that does. Measured on CI's
# machine kind (2-core AMD EPYC, AVX2, no AVX-512), alone on it, 2026-12-05: 1,802 checks in
# 340-356 CPU seconds (174-183 s wall) once the workers composed each defaults tree once
# (helpers/compose_cache.py); the tree before them (beed69b) took 467 in a slower hour of that
# host and 434 in a faster one. On 2026-12-06 the same host slowed through one hour until the
# import CPU of `bench/startup.py --collector` read 7.90 s against 5.01 s in a fast hour
# (1.58x), and the same suite took 502 CPU seconds (343 earlier that night): 520 would have
# failed on a slow hour, not on growth. The budget is that slow hour's figure with a quarter
# more (CPU time grows with contention too: ~1.25x beside the slow stage): ~1.9x a fast hour.
BUDGET_CPU_S_WITHOUT_AVX512 = 650.0
# A core with AVX-512 ran the suite in 0.64x the CPU seconds of CI's kind (427 against 670,
# 2026-12-04/05, with the code of those days); not measured again since (no such host here):
# 340 x 0.64 is ~218 expected; this budget keeps the ratio of the two budgets it had.
BUDGET_CPU_S = 500.0
# pyproject's addopts: what `make test` selects
DEFAULT_MARKERS = "not slow and not bench"
# seconds per check, committed: those of a second or more in `make test` and the slow stage,
# by which a checkout without a pytest cache (CI's fresh clone) orders its checks longest
# first (conftest.py); a run with LITLAB_SAVE_DURATIONS=1 refreshes it
DURATIONS_FILE = Path(__file__).parents[1] / "durations.json"
SAVE_FROM_S = 1.0


def recorded_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    return json.loads(path.read_text()) if path.is_file() else {}


def save_durations(measured: dict[str, float], path: Path = DURATIONS_FILE) -> None:
    """Merge this run's checks of SAVE_FROM_S or more into `path` (a check now faster than
    that leaves it)."""
    kept = {k: v for k, v in recorded_durations(path).items() if k not in measured}
    kept |= {k: round(v, 1) for k, v in measured.items() if v >= SAVE_FROM_S}
    path.write_text(json.dumps(dict(sorted(kept.items())), indent=0) + "\n")


def has_avx512(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU has AVX-512 (read from /proc/cpuinfo, not by importing torch in the
    controller); where it cannot be read, the machine counts as CI's (AVX-512)."""
    try:
        return "avx512bw" in cpuinfo.read_text()
    except OSError:
        return True


def budget_s() -> float:
    """LITLAB_TEST_BUDGET_S, else the figure of the CPU kind this machine is."""
    chosen = os.environ.get("LITLAB_TEST_BUDGET_S")
    if chosen:
        return float(chosen)
    return BUDGET_CPU_S if has_avx512() else BUDGET_CPU_S_WITHOUT_AVX512


def cpu_seconds(children: bool = True) -> float:
    """User + system seconds of this process and, with `children`, of its children that were
    waited for. xdist's controller counts itself only: its children are the workers, whose
    own figures (their checks' subprocesses included) it adds up already."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    seconds = own.ru_utime + own.ru_stime
    if children:
        waited = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds += waited.ru_utime + waited.ru_stime
    return seconds


def over_budget(cpu: dict[str, float], durations: dict[str, float], budget: float | None = None):
    """None within the budget; else the one line that says by how much and where to look."""
    budget = budget_s() if budget is None else budget
    total = sum(cpu.values())
    if total <= budget:
        return None
    slowest = sorted(durations.items(), key=lambda kv: -kv[1])[:3]
    names = ", ".join(f"{nodeid.split('@')[0]} {s:.0f} s" for nodeid, s in slowest)
    return (
        f"make test used {total:.0f} CPU seconds, over its budget of {budget:.0f} "
        f"(tests/helpers/budget.py); the slowest checks: {names}"
    )
