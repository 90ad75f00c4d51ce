"""The JSON Schemas of the config groups (schemas/, written by `python -m
litlab.config.schemas`): every config file names its group's, passes it, and the committed
files are what the models that judge a command line say now; a bad value or an unknown key
in a config file fails its schema, as it fails the command."""

import json
import os

import pytest
from helpers.runs import ROOT
from omegaconf import OmegaConf

from litlab.config.schemas import SCHEMA_DIR, group_of, schemas

FILES = sorted((ROOT / "configs").rglob("*.yaml"))


def _schema(path) -> dict:
    return json.loads((SCHEMA_DIR / f"{group_of(path)}.json").read_text())


def _errors(data, schema) -> list[str]:
    """What jsonschema finds wrong in `data` (a group's schema refers to its file beside)."""
    import jsonschema  # here, not at collection: 1.2 s in every worker (its format checkers)
    from referencing import Registry, Resource

    files = [(p.name, Resource.from_contents(json.loads(p.read_text()))) for p in SCHEMA_DIR.glob("*.json")]  # fmt: skip
    validator = jsonschema.Draft202012Validator(schema, registry=Registry().with_resources(files))
    return [e.message[:200] for e in validator.iter_errors(data)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_every_config_file_names_and_passes_its_groups_schema(path):
    rel = os.path.relpath(SCHEMA_DIR / f"{group_of(path)}.json", path.parent)
    header = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    assert f"# yaml-language-server: $schema={rel}" in header, f"{path}: add that line on top"
    data = OmegaConf.to_container(OmegaConf.load(path)) or {}
    assert _errors(data, _schema(path)) == []


def test_the_committed_schemas_are_the_models_own():
    made = schemas()
    committed = {p.stem: json.loads(p.read_text()) for p in SCHEMA_DIR.glob("*.json")}
    stale = sorted(set(committed) ^ set(made)) + [k for k in made if made[k] != committed.get(k)]
    assert not stale, f"run `python -m litlab.config.schemas` (make schemas): {stale}"


@pytest.mark.parametrize(
    "group,data,says",
    [
        ("data", {"_target_": "litlab.domains.vision.data.DigitsDataModule", "batch_size": 0}, "0 is not valid"),
        ("data", {"_target_": "litlab.domains.vision.data.DigitsDataModule", "batchsize": 8}, "batchsize"),
        ("model", {"_target_": "litlab.domains.vision.module.ImageClassifier", "label_smoothing": 2}, "2"),
        ("trainer", {"_target_": "lightning.pytorch.Trainer", "max_epochs": 0}, "0"),
        ("train", {"seed": -5}, "-5"),
        ("train", {"callbacks": {"stop": {"_target_": "lightning.pytorch.callbacks.EarlyStopping", "patience": -1}}}, "-1"),
        ("serve", {"port": 99999}, "99999"),
        ("federate", {"federate": {"num_clients": 0}}, "0"),
    ],
)  # fmt: skip
def test_a_bad_value_or_unknown_key_fails_its_schema(group, data, says):
    errors = _errors(data, json.loads((SCHEMA_DIR / f"{group}.json").read_text()))
    assert errors and any(says in e for e in errors), errors


def test_an_interpolation_passes_where_a_number_goes():
    schema = json.loads((SCHEMA_DIR / "data.json").read_text())
    node = {"_target_": "litlab.domains.vision.data.DigitsDataModule", "seed": "${seed}"}
    assert _errors(node, schema) == []
    assert _errors({**node, "batch_size": "lots"}, schema) != []
