"""The search space of an Optuna search, from YAML or from the command line.

YAML (`hydra.sweeper.params` of configs/hparams_search/*.yaml), one entry per config key:

    model.optimizer.lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
    model.net.dropout: {type: float, low: 0.0, high: 0.5}
    trainer.accumulate_grad_batches: {type: int, low: 1, high: 4}
    data.batch_size: {type: categorical, choices: [32, 64, 128]}

Hydra's sweep syntax works too, in YAML or as a plain override on the command line:
`choice(32,64)`, `range(1,5)` (int), `interval(0.1,0.5)` (float),
`tag(log,interval(1e-4,1e-1))` (log-float), `tag(int,interval(1,8))` (int).
Sampled values reach the job as ordinary overrides (`key=value`), like Hydra's own sweepers.
"""

import re
from typing import Any

SIMPLE = re.compile(r"^[\w.\-/:@]+$")
SPEC_KEYS = {"type", "low", "high", "log", "step", "choices"}


def as_override_value(value: Any) -> str:
    """A sampled value written as Hydra override syntax."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if SIMPLE.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _flatten(params: dict, prefix: str = "") -> dict[str, Any]:
    """`{model: {net: {dropout: spec}}}` (a command-line key) -> `{model.net.dropout: spec}`."""
    flat = {}
    for key, spec in params.items():
        name = f"{prefix}{key}"
        if isinstance(spec, dict) and not SPEC_KEYS & set(spec):
            flat.update(_flatten(spec, name + "."))
        else:
            flat[name] = spec
    return flat


def from_spec(name: str, spec: Any):
    """One Optuna distribution from a YAML entry (dict, list of choices, or sweep string)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from litlab.errors import UserError

    if isinstance(spec, str):
        return from_override(f"{name}={spec}")
    if isinstance(spec, list | tuple):
        return CategoricalDistribution(list(spec))
    if not isinstance(spec, dict):
        raise UserError(
            f"search space entry {name}: expected a dict such as "
            f"{{type: float, low: 0.0, high: 1.0}}, a list of choices or "
            f"interval(...)/choice(...), got {spec!r}"
        )
    kind = spec.get("type") or (
        "categorical"
        if "choices" in spec
        else "int"
        if all(isinstance(spec.get(k), int) for k in ("low", "high"))
        else "float"
    )
    try:
        if kind == "categorical":
            return CategoricalDistribution(list(spec["choices"]))
        if kind == "int":
            return IntDistribution(
                int(spec["low"]),
                int(spec["high"]),
                log=bool(spec.get("log")),
                step=int(spec.get("step") or 1),
            )
        if kind == "float":
            step = spec.get("step")
            return FloatDistribution(
                float(spec["low"]),
                float(spec["high"]),
                log=bool(spec.get("log")),
                step=None if step is None else float(step),
            )
    except (KeyError, ValueError) as err:
        raise UserError(f"search space entry {name}: {err} (spec {spec})") from err
    raise UserError(
        f"search space entry {name}: type {kind!r} is not valid; choose float, int or categorical"
    )


def from_override(text: str):
    """One Optuna distribution from Hydra sweep syntax, e.g. `lr=tag(log,interval(1e-4,1))`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from litlab.errors import UserError

    override = OverridesParser.create().parse_overrides([text])[0]
    sweep = override.value()
    if isinstance(sweep, ChoiceSweep):
        return CategoricalDistribution(list(sweep.list))
    if isinstance(sweep, RangeSweep):
        if all(isinstance(v, int) for v in (sweep.start, sweep.stop, sweep.step)):
            return IntDistribution(sweep.start, sweep.stop - 1, step=sweep.step)
        return CategoricalDistribution(list(override.sweep_iterator()))
    if isinstance(sweep, IntervalSweep):
        if "int" in sweep.tags:
            return IntDistribution(int(sweep.start), int(sweep.end), log="log" in sweep.tags)
        return FloatDistribution(sweep.start, sweep.end, log="log" in sweep.tags)
    raise UserError(
        f"{text}: not a search dimension; use choice(...), range(...) or "
        "interval(...) (optionally tag(log, ...))"
    )


def build_space(params: dict | None, arguments: list[str]) -> tuple[dict, list[str]]:
    """(search space {key: distribution}, fixed overrides) from YAML params and the command line.

    Command-line sweep overrides (`key=choice(...)`) join the search space; all other
    overrides are passed unchanged to every trial (and pin a key of the YAML space).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    space = {name: from_spec(name, spec) for name, spec in _flatten(params or {}).items()}
    fixed = []
    for text, override in zip(arguments, OverridesParser.create().parse_overrides(arguments)):
        if override.is_sweep_override():
            space[override.get_key_element()] = from_override(text)
        else:
            fixed.append(text)
            space.pop(override.get_key_element().lstrip("+~"), None)  # pinned by the user
    return space, fixed


def suggest(trial, space: dict) -> dict[str, Any]:
    """Sample every dimension of `space` for this trial."""
    from optuna.distributions import FloatDistribution, IntDistribution

    values = {}
    for name, dist in space.items():
        if isinstance(dist, FloatDistribution):
            values[name] = trial.suggest_float(
                name, dist.low, dist.high, log=dist.log, step=dist.step
            )
        elif isinstance(dist, IntDistribution):
            values[name] = trial.suggest_int(
                name, dist.low, dist.high, log=dist.log, step=dist.step
            )
        else:
            values[name] = trial.suggest_categorical(name, dist.choices)
    return values
