"""Every config file composes, and the command-line switches of the README resolve."""

import pytest
from helpers.runs import ROOT
from omegaconf import OmegaConf

from litlab.config.compose import compose

GROUPS = ["data", "model", "trainer", "callbacks", "logger", "debug", "experiment"]


def options(group: str) -> list[str]:
    return sorted(
        p.stem
        for p in (ROOT / "configs" / group).glob("*.yaml")
        if p.stem != "default" or group in ("trainer", "callbacks")
    )


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_resolves(group, option, tmp_path):
    overrides = [f"{group}={option}"]
    if group == "data" and option == "imagefolder":
        overrides.append(f"data.root={tmp_path}")
    cfg = compose("train", overrides, output_dir=tmp_path)
    resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    assert resolved["paths"]["output_dir"] == str(tmp_path)
    assert cfg.model._target_ and cfg.data._target_ and cfg.trainer._target_


def test_eval_config_composes(tmp_path):
    cfg = compose("eval", ["ckpt_path=x.ckpt"], output_dir=tmp_path)
    assert cfg.ckpt_path == "x.ckpt" and cfg.split == "test"


@pytest.mark.parametrize(
    "key",
    [
        "trainer.fast_dev_run=true",
        "trainer.limit_train_batches=3",
        "trainer.precision=bf16-mixed",
        "trainer.accumulate_grad_batches=2",
        "trainer.gradient_clip_val=1.0",
        "trainer.max_epochs=3",
        "seed=7",
    ],
)
def test_common_keys_need_no_plus(key, tmp_path):
    cfg = compose("train", [key], output_dir=tmp_path)
    name, value = key.split("=")
    node = cfg
    for part in name.split("."):
        node = node[part]
    assert str(node).lower() == value.lower()


def test_configs_point_at_real_classes():
    import hydra

    from litlab.config.rules import target_of

    for path in (ROOT / "configs" / "data").glob("*.yaml"):  # extended configs: their parent's
        assert hasattr(hydra.utils.get_class(target_of(path)), "kind"), path


def _annotations():
    from pathlib import Path
    from typing import Literal

    import torch
    from lightning.pytorch.callbacks import Callback

    from litlab.bounds import LearningRate, PosInt, Probability

    epochs = PosInt | Literal[-1]
    return Path, torch.Tensor, Callback, LearningRate, PosInt, Probability, epochs


@pytest.mark.parametrize(
    "value,which,ok",
    [
        ("fast", "LearningRate", False),  # a word for a number: refused, never coerced
        (float("inf"), "LearningRate", False),
        (10**400, "LearningRate", False),  # an int too large for a float
        (1e-3, "LearningRate", True),
        (1, "LearningRate", True),  # an int where a float is asked
        (True, "PosInt", False),  # a bool is no integer
        (True, "epochs", False),
        (-1, "epochs", True),
        (0, "epochs", False),
        (1.0, "Probability", False),
        ("/data", "Path", True),  # the constructor converts it
        ({"_target_": "x.Y"}, "Callback", True),  # a node: built, then judged
        ("fast", "Tensor", False),
        (0.5, "Tensor", True),
    ],
)
def test_values_are_judged_by_their_annotation(value, which, ok):
    """`models.accepts` (pydantic over the annotation) as `_target_` arguments are checked."""
    from litlab.config.models import accepts

    names = ("Path", "Tensor", "Callback", "LearningRate", "PosInt", "Probability", "epochs")
    ann = dict(zip(names, _annotations(), strict=True))[which]
    assert accepts(value, ann) is ok
    assert accepts([value], list[ann]) is ok
    assert accepts(value, list[ann]) is False or isinstance(value, list)  # one is no list
    assert accepts("ab", list[str]) is False  # a str is a sequence, not a list


def test_an_annotation_pydantic_cannot_judge_leaves_the_value_to_the_constructor():
    """A bound on a class a config cannot hold (compared with a str: refused, as before) and
    metadata pydantic has no rule for (left to the constructor) never raise out of the check."""
    from pathlib import Path
    from typing import Annotated

    import annotated_types as at

    from litlab.config.models import accepts

    assert accepts("x", Annotated[Path, at.Ge(1)]) is False
    assert accepts(2, Annotated[Path, at.Ge(1)]) is True
    assert accepts(3, Annotated[int, object()]) is True  # unknown metadata: ignored


def test_the_parse_cache_gives_each_caller_its_own_copy_and_sees_an_edited_file(tmp_path):
    """tests/helpers/yaml_cache.py, active here: a change to a loaded config stays with its
    caller, an edited file is parsed again, a stream ends where the real load leaves it, and a
    text that does not parse fails on every load."""
    from helpers.yaml_cache import cached_load

    assert OmegaConf.load is cached_load
    path = tmp_path / "a.yaml"
    path.write_text("x: 1\nnested: {y: [1, 2]}\n")
    first = OmegaConf.load(path)
    first.x, first.nested.y[0] = 2, 5
    assert OmegaConf.load(path) == {"x": 1, "nested": {"y": [1, 2]}}
    path.write_text("x: 3\n")
    with open(path) as f:
        assert OmegaConf.load(f) == {"x": 3} and f.read() == ""
    path.write_text("x: [\n")
    for _ in range(2):
        with pytest.raises(Exception, match="expected"):
            OmegaConf.load(path)


def test_interpolations_parsed_once_still_resolve_in_their_own_config_and_fail_each_time():
    """tests/helpers/yaml_cache.py's parse cache, active here: one string in two configs
    resolves to each config's value, and a string that does not parse fails on every use."""
    from helpers.yaml_cache import cached_parse
    from omegaconf import base
    from omegaconf.errors import GrammarParseError

    assert base.parse is cached_parse
    first = OmegaConf.create({"a": 1, "b": "${a}", "c": "x${a}y"})
    second = OmegaConf.create({"a": 2, "b": "${a}", "c": "x${a}y"})
    assert (first.b, first.c, second.b, second.c) == (1, "x1y", 2, "x2y")
    for _ in range(2):
        with pytest.raises(GrammarParseError):
            cached_parse("${a")


_COMPOSED = [  # group choices, values, additions, deletions, Hydra's own node, a refusal
    ["model.optimizer.lr=0.5"],
    ["experiment=gcn_cora", "seed=3", "~callbacks.early_stopping", "++trainer.max_epochs=4"],
    ["logger=csv", "trainer=ddp", "+trainer.num_nodes=1", "hydra.job.chdir=false"],
    ["model.net.dropout=0.2", "model.optimizer={lr: 0.1}"],
    ["model=gnn", "model={a: 1}"],
]


def _flags(node, path="") -> list:
    """Each container's type, struct and read-only flags, as OmegaConf reports them."""
    from omegaconf import DictConfig, ListConfig

    if not isinstance(node, DictConfig | ListConfig):
        return []
    own = [(path, OmegaConf.get_type(node), OmegaConf.is_struct(node), OmegaConf.is_readonly(node))]
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    return own + [
        flag
        for key in keys
        if not OmegaConf.is_missing(node, key)
        for flag in _flags(node._get_node(key), f"{path}.{key}")
    ]


def test_the_composition_cache_composes_what_hydra_composes(tmp_path):
    """tests/helpers/compose_cache.py, active here: each command composes, or fails, as
    Hydra alone composes it (the whole config, `hydra` node included), on a miss and on a
    hit; an edited config file is read again."""
    from helpers import compose_cache
    from hydra._internal import config_loader_impl

    from litlab.config import compose as composing

    assert config_loader_impl.create_defaults_list is compose_cache.cached_defaults_list

    def composed(overrides):
        try:
            cfg = composing.compose("train", overrides)
        except Exception as err:  # noqa: BLE001  (the error is what is compared)
            return f"{type(err).__name__}: {err}"
        return OmegaConf.to_yaml(cfg), _flags(cfg)

    with pytest.MonkeyPatch.context() as patch:  # Hydra's own functions
        compose_cache.install(patch, own=True)
        expected = [composed(overrides) for overrides in _COMPOSED]
    assert sum("Could not override 'model'" in str(e) for e in expected) == 1  # the refusal
    assert [composed(o) for o in _COMPOSED] == expected
    assert [composed(o) for o in _COMPOSED] == expected  # every one a hit now

    # a config dir of its own: a default that is an interpolation, a file edited in between
    for folder, name, text in [
        ("g", "a", "epochs: 30\n"),
        ("g", "b", "epochs: 5\n"),
        ("h", "a", "depth: 1\n"),
        ("h", "b", "depth: 2\n"),
    ]:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / f"{name}.yaml").write_text(text)
    (tmp_path / "main.yaml").write_text("defaults:\n  - g: a\n  - h: ${g}\n  - _self_\nx: 1\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(composing, "CONFIG_DIR", tmp_path)
        with pytest.MonkeyPatch.context() as own:
            compose_cache.install(own, own=True)
            expected = [OmegaConf.to_yaml(composing.compose("main", o)) for o in (["x=2"], ["g=b"])]
        assert [
            OmegaConf.to_yaml(composing.compose("main", o)) for o in (["x=2"], ["g=b"])
        ] == expected
        assert "depth: 2" in expected[1] and "epochs: 5" in expected[1]
        (tmp_path / "g" / "a.yaml").write_text("epochs: 31\n")
        assert composing.compose("main", ["x=2"]).g == {"epochs": 31}
        # a default that reads the environment follows it (such a tree is never kept)
        (tmp_path / "env.yaml").write_text("defaults:\n  - h: ${oc.env:LITLAB_H_CHOICE,a}\n")
        depths = []
        for choice in ("a", "b", "a"):
            patch.setenv("LITLAB_H_CHOICE", choice)
            depths.append(composing.compose("env").h.depth)
        assert depths == [1, 2, 1]
        # a search path of more files than the cache lists (`--config-dir ~`): composed, not kept
        patch.setattr(compose_cache, "MAX_FILES", 3)
        kept = len(compose_cache._lists)
        assert composing.compose("main", ["h=b"]).h == {"depth": 2}  # groups not composed yet
        assert len(compose_cache._lists) == kept
