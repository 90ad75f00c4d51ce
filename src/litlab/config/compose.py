"""Compose a config in Python exactly as `python src/<name>.py overrides` would: for tests,
benchmarks and notebooks that call `train(cfg)` in-process.

Hydra's composition errors (unknown group option, unknown key, bad override syntax) as the
one line a user reads. The CLI condenses what Hydra prints; `litlab.train([...])` condenses the
exception `compose` raises: both give the same line."""

import re
from itertools import takewhile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from litlab.config.resolvers import CONFIG_DIR
from litlab.errors import closest


def compose(config_name: str = "train", overrides=(), output_dir: str | Path | None = None):
    """The composed config (with its `hydra` node, registered as the current HydraConfig).

    `output_dir` plays the run dir Hydra would create (made if missing)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name, overrides=list(overrides), return_hydra_config=True)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.job.num = 0
            cfg.hydra.job.id = "in-process"
        Path(output_dir).mkdir(parents=True, exist_ok=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


# ---------------------------------------------------------------- errors
QUOTING = (
    "quote a value with spaces or other characters than letters, digits and _-./: "
    "'key=\"my value\"' (the outer quotes are for the shell)"
)


def _condense_special(lines: list[str]) -> str | None:
    """A traceback (e.g. the run dir cannot be made): its last line. An unquoted value: how
    to quote it."""
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        last = next(ln for ln in reversed(lines) if not ln.startswith(("File ", "Traceback")))
        if "mkdir" in " ".join(lines):
            return f"cannot create the run dir (check paths.log_dir, LITLAB_LOG_DIR, hydra.run.dir): {last}"
        return last
    lexer = next((ln for ln in lines if "LexerNoViableAltException" in ln), None)
    if lexer:
        text = lexer.split("LexerNoViableAltException:", 1)[1].split(" ^")[0].strip()
        return f"cannot parse override '{text}': {QUOTING}"
    return None


# the end of a line of Hydra's that holds the error itself ("Error locating target 'x', set
# env var ..."), unlike its own line of advice ("Set the environment variable ...")
_CHAINED = re.compile(r",? set env var HYDRA_FULL_ERROR=1 to see chained exception\.?")


def condense(message: str) -> str:
    """Turn one of Hydra's multi-line composition errors into a single line."""
    lines = [_CHAINED.sub("", ln.strip()) for ln in message.splitlines()]
    lines = [ln for ln in lines if ln and "HYDRA_FULL_ERROR" not in ln]
    special = _condense_special(lines)
    if special:
        return special
    # Hydra's own line only: a refusal of litlab's may quote it (a sampler that cannot be built)
    target = re.match(r"Error locating target '([^']+)'", lines[0]) if lines else None
    if target:
        return (
            f"_target_ '{target.group(1)}' cannot be imported; valid: the dotted path of a class "
            "or function (e.g. lightning.pytorch.callbacks.ModelCheckpoint)"
        )
    missing = re.search(r"Could not find '([^']+)'", message)
    if missing and "Available options" in message:
        group, _, value = missing.group(1).rpartition("/")
        after = message.split("Available options", 1)[1].splitlines()[1:]
        # the indented lines right after the heading are the options
        options = [
            ln.strip() for ln in takewhile(lambda ln: ln[:1].isspace() and ln.strip(), after)
        ]
        return f"unknown option {group}={value}; valid {group} options: {', '.join(options)}"
    inner = re.search(r"In '([^']+)': Could not override '([^']+)'", message)
    if inner:  # a config's own defaults list overrides a group this entry point lacks
        return (
            f"config {inner.group(1)} cannot be used here: it picks a {inner.group(2)} option "
            f"(its defaults list), and this command has no {inner.group(2)} group"
        )
    key = re.search(r"Could not override '([^']+)'", message)
    if key:
        hint = next((ln for ln in lines if ln.startswith("To append")), "")
        hint = hint.replace("To append to your config use", "to add a new key use")
        return f"unknown config key '{key.group(1)}'" + (f" ({hint})" if hint else "")
    details = ("full_key:", "object_type=", "reference_type=")
    lines = [ln for ln in lines if not ln.startswith(details)]
    return " ".join(lines)


def composition_error(message: str, config_name: str, overrides: list[str]) -> str:
    """The condensed error, naming the closest valid key of a typo and the override Hydra
    could not parse (its parse errors do not say which)."""
    line = condense(message) or (
        "the command stopped before its run started without saying why; HYDRA_FULL_ERROR=1 "
        "shows where"
    )
    key = re.match(r"unknown config key '([^']+)'", line)
    rebuilt = key and rebuilt_group(key.group(1), config_name, list(overrides))
    if rebuilt:
        return rebuilt
    if key:
        hint = closest_key(key.group(1), config_name, list(overrides))
        line = line.replace(f"'{key.group(1)}'", f"'{key.group(1)}'" + hint, 1)
    syntax = re.search(r"at input '([^']*)'", line)
    arg = syntax and next((a for a in overrides if syntax.group(1) in a), None)
    if arg:
        line = f"cannot parse override '{arg}': {line}"
    return line


def rebuilt_group(dotted: str, config_name: str, overrides: list[str]) -> str | None:
    """`data.path=X` refused by a command whose config takes `data_overrides` instead (eval,
    export, compress): the line saying how (`checks.rebuilt_group_refusal`)."""
    from litlab.config.checkpoints import REBUILT, rebuilt_group_refusal

    bad = dotted.lstrip("+~")
    if bad.split(".")[0] not in REBUILT:
        return None
    try:  # the entry point's own file says whether it takes data_overrides
        own = OmegaConf.load(CONFIG_DIR / f"{config_name}.yaml")
    except Exception:  # not a config of this project: Hydra's own line stands
        return None
    if "data_overrides" not in own:
        return None
    given = next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") == bad), bad)
    return rebuilt_group_refusal(given, config_name)


def closest_key(dotted: str, config_name: str, overrides: list[str]) -> str:
    """'; did you mean trainer.max_epochs?' for a key Hydra refused (composes without it)."""
    bad = dotted.lstrip("+~")
    kept = [
        o
        for o in overrides
        if not o.startswith(("-", "hydra.")) and o.split("=", 1)[0].lstrip("+~") != bad
    ]
    try:
        cfg = compose(config_name, kept)
    except Exception:
        return ""
    parent, _, name = bad.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return ""
    hint = closest(name, [str(k) for k in node])
    return hint.replace("mean ", f"mean {parent}.") if parent and hint else hint
