"""A JSON Schema per config group, from the models that judge the configs (`config.models`'
node models, `config.entries`' settings), so an editor reading the
`# yaml-language-server: $schema=...` line of each configs/**/*.yaml completes and checks its
keys as they are typed. `python -m litlab.config.schemas` (make schemas) writes schemas/;
tests/test_schemas.py checks they are current and that every shipped YAML passes its own.
Interpolations (`${...}`) and `???` pass wherever a value goes: Hydra resolves them later.
"""

import json
import sys

from omegaconf import OmegaConf

from litlab.config.after_training import Steps
from litlab.config.entries import ENTRIES
from litlab.config.models import node_model
from litlab.config.resolvers import CONFIG_DIR
from litlab.config.rules import target_of

SCHEMA_DIR = CONFIG_DIR.parent / "schemas"
#: groups whose files map names to nodes (`early_stopping: {_target_: ...}`)
NAMED = ("callbacks", "logger", "tune")
#: groups of Hydra's own settings and plain keys: any mapping
FREE = ("hydra", "paths", "extras", "local")
#: groups of `# @package _global_` files: a train config's keys
GLOBAL = ("experiment", "debug", "hparams_search", "profiler")
#: targets whose signatures are read (installed wherever litlab is); others (optional extras:
#: loggers, SLURM, Flower) by what `config.models.EXTERNAL` knows of their name, so every machine
#: writes the same schemas
READ = ("litlab.", "torch.", "lightning.", "hydra_plugins.litlab")
RESOLVED_LATER = {"type": "string", "pattern": r"^\?\?\?$|\$\{"}


def group_of(path) -> str:
    """The schema's name of a config file: its group folder, or its entry point (a
    `# @package _global_` group's files hold a train config's keys: train)."""
    rel = path.relative_to(CONFIG_DIR)
    if not rel.parent.parts:
        return path.stem
    return "train" if rel.parts[0] in GLOBAL else str(rel.parent).replace("/", ".")


def schemas() -> dict[str, dict]:
    """Every schema by name (schemas/<name>.json)."""
    names = {group_of(p) for p in CONFIG_DIR.rglob("*.yaml")}
    return {name: _schema(name) for name in sorted(names)}


def _schema(name: str) -> dict:
    if name in ENTRIES:
        schema = ENTRIES[name].model_json_schema()
        entry = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{name}.yaml"))
        named = {k.split(" ")[-1] for d in entry["defaults"] if isinstance(d, dict) for k in d}
        for group in sorted((named | set(entry)) & {"trainer", "model", "data", *NAMED}):
            schema["properties"][group] = {"$ref": f"{group}.json"}  # its file beside
        if "compress" in schema["properties"]:
            schema["properties"]["compress"] = {"$ref": "compress.json"}
        schema.pop("required", None)
        schema["additionalProperties"] = True  # hydra, paths, extras, threads...
    elif name.split(".")[0] in FREE and name != "hydra.launcher":
        schema = {"type": "object"}
    elif name == "compress":
        schema = Steps.model_json_schema()
    else:
        schema = _group(name.replace(".", "/"))
    return _loose({"$schema": "https://json-schema.org/draft/2020-12/schema", **schema})


def _group(group: str) -> dict:
    """The files of configs/<group>/: one of its targets' nodes (or, for NAMED groups, a
    mapping of names to them)."""
    files = sorted((CONFIG_DIR / group).glob("*.yaml"))
    if group in NAMED:
        nodes = [OmegaConf.to_container(OmegaConf.load(p)) for p in files]
        targets = {n.get("_target_") for f in nodes for n in f.values() if isinstance(n, dict)}
    else:
        targets = {target_of(p) for p in files}
    targets = sorted(t for t in targets if t)
    nodes = {t: _node(t) for t in targets}
    node = {  # by its `_target_` (precise errors); without one (a file extending another): any
        "type": ["object", "null"],
        "allOf": [{"if": _names(t), "then": n} for t, n in nodes.items()],
        "if": {"type": "object", "required": ["_target_"]},
        "else": {"anyOf": [*nodes.values(), {"type": "null"}]},
    }
    if group in NAMED:
        return {"type": ["object", "null"], "properties": {}, "additionalProperties": node}
    return node


def _names(target: str) -> dict:
    return {
        "type": "object",
        "required": ["_target_"],
        "properties": {"_target_": {"const": target}},
    }


def _node(target: str) -> dict:
    """A `_target_` node's schema: its target's model, plus Hydra's `_..._` keys."""
    schema = node_model(target, imported=target.startswith(READ)).model_json_schema()
    schema["properties"]["_target_"] = {"const": target}
    schema["patternProperties"] = {"^_.+_$": {}}
    schema.pop("required", None)
    return schema


def _loose(schema):
    """`schema` with every value of a key able to be an interpolation instead, and `defaults`
    (Hydra's list) allowed in every mapping."""
    if isinstance(schema, list):
        return [_loose(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _loose(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {
            k: {"anyOf": [v, RESOLVED_LATER]} for k, v in out["properties"].items()
        }
        out["properties"].setdefault("defaults", {"type": "array"})
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = {"anyOf": [out["additionalProperties"], RESOLVED_LATER]}
    return out


def write() -> list[str]:
    """schemas/*.json as the models say now; returns the names written."""
    SCHEMA_DIR.mkdir(exist_ok=True)
    every = schemas()
    for name, schema in every.items():
        (SCHEMA_DIR / f"{name}.json").write_text(
            json.dumps(schema, indent=1, sort_keys=True) + "\n"
        )
    return list(every)


if __name__ == "__main__":
    print(f"{len(write())} schemas in {SCHEMA_DIR}", file=sys.stderr)
