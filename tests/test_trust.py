"""The trust boundary: a checkpoint's stored config is data. Each mechanism by which a crafted
config could run code (a target behind an interpolation, behind a resolver, under `hydra`, in
a list item, a litlab function, a non-class callable, an env resolver) is tried against every
entry point that loads a checkpoint; the side effect it aims at must not happen. Run dirs and
their lock: tests/test_run_dirs.py."""

import copy
from pathlib import Path

import pytest
import torch
from helpers.runs import run_cli
from helpers.trust import Victims

from litlab.errors import UserError

# the tests on the shared digits checkpoint run on digits_run's worker (--dist loadgroup)
DIGITS = pytest.mark.xdist_group("digits_run")


def _copy(v):
    return {"_target_": "shutil.copy", "src": str(v.file), "dst": str(v.copy)}


# mechanism -> (edit of the stored config, the key the refusal must name)
CASES = {
    "interpolated target": (
        lambda c, v: (
            c["data"].update(_target_="${notes.target}", src=str(v.file))
            or c.update(notes={"target": "shutil.copy"})
        ),
        "data._target_",
    ),
    "resolver": (
        lambda c, v: c["data"].update(
            batch_size="${oc.create:{_target_: shutil.copy, src: '"
            + f"{v.file}', dst: '{v.copy}'"
            + "}}"
        ),
        "data.batch_size",
    ),
    "under hydra": (
        lambda c, v: (
            c.update(hydra={"evil": _copy(v)}) or c["data"].update(batch_size="${hydra.evil}")
        ),
        "'hydra'",
    ),
    "list item": (
        lambda c, v: c["data"].update(augment=[{"_target_": "shutil.rmtree", "path": str(v.dir)}]),
        "data.augment[0]._target_=shutil.rmtree",
    ),
    "litlab function": (
        lambda c, v: c.update(data={"_target_": "litlab.runs.run_dir.remove", "path": str(v.dir)}),
        "data._target_=litlab.runs.run_dir.remove",
    ),
    "non-class callable": (
        lambda c, v: c["model"]["net"].update(_target_="torch.save", obj=0, f=str(v.file)),
        "model.net._target_=torch.save",
    ),
    "env resolver": (
        lambda c, v: c["data"].update(data_dir="${oc.env:LITLAB_TEST_EVIL," + f"{v.dir}" + "}"),
        "data.data_dir",
    ),
    "data folder elsewhere": (
        lambda c, v: c["data"].update(data_dir=str(v.dir / "planted")),
        "data.data_dir",
    ),
}


@pytest.fixture
def crafted(digits_run, tmp_path):
    """`crafted(mechanism)`: (a tampered copy of the shared digits checkpoint, its victims)."""
    stored = torch.load(digits_run.best, weights_only=True)

    def make(mechanism: str):
        folder = tmp_path / mechanism.replace(" ", "_")
        folder.mkdir()
        victims = Victims(folder)
        ckpt = copy.deepcopy(stored)
        CASES[mechanism][0](ckpt["litlab_config"], victims)
        torch.save(ckpt, folder / "evil.ckpt")
        return folder / "evil.ckpt", victims

    return make


def _load_run(path, out):
    from litlab.runs.rebuild import load_run

    load_run(path)


def _eval(path, out):
    from litlab import evaluate

    evaluate([f"ckpt_path={path}", f"paths.log_dir={out}", "extras.print_config=false"])


def _export(path, out):
    from litlab.export.recipe import export_checkpoint

    export_checkpoint(path, out / "export", formats=["onnx"], latency={"batch_sizes": []})


def _compress(path, out):
    from litlab.api import run
    from litlab.compression.recipe import compress

    run("compress", [f"ckpt_path={path}", f"paths.log_dir={out}"], compress)


def _serve(path, out):
    from litlab.serving.server import model_file

    model_file(path, out / "serve")


ENTRY_POINTS = {
    "load_run": _load_run,
    "eval": _eval,
    "export": _export,
    "compress": _compress,
    "serve": _serve,
}


@DIGITS
@pytest.mark.parametrize("mechanism", list(CASES))
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_crafted_config_is_refused_without_side_effect(crafted, mechanism, entry, tmp_path):
    path, victims = crafted(mechanism)
    out = tmp_path / "logs"
    with pytest.raises(UserError) as err:
        ENTRY_POINTS[entry](path, out)
    line = str(err.value)
    assert "\n" not in line and CASES[mechanism][1] in line and "trust_checkpoint=true" in line
    assert victims.untouched(), f"{mechanism} via {entry} had a side effect"
    assert not any(p.is_file() for p in out.rglob("*")), "something was written"


# two subprocesses (each imports torch): eval.py's command (run in-process: its exit 2 and
# one line) is in test_reliability_faults.py, and export.py's route is serve.py's (a
# checkpoint is exported first). The slow stage's (11 s each): every entry point meets every
# mechanism in process above, in make test
SCRIPTS = [
    pytest.param("compress.py", "ckpt_path", "list item", marks=pytest.mark.slow),
    pytest.param("serve.py", "model_path", "resolver", marks=pytest.mark.slow),
]


@DIGITS
@pytest.mark.parametrize("script, key, mechanism", SCRIPTS)
def test_crafted_checkpoint_on_the_command_line(crafted, tmp_path, script, key, mechanism):
    path, victims = crafted(mechanism)
    logs = tmp_path / "logs"
    p = run_cli(script, f"{key}={path}", log_dir=logs, check=False, quiet=False)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and CASES[mechanism][1] in lines[0], lines
    assert victims.untouched()
    assert not any(p.is_file() for p in logs.rglob("*")), "a run dir was left"


@DIGITS
def test_trusted_file_is_built_as_stored(digits_run, tmp_path):
    """trust=True is the explicit way to load a file one trusts: interpolations resolve."""
    from litlab.runs.rebuild import load_run

    ckpt = torch.load(digits_run.best, weights_only=True)
    ckpt["litlab_config"]["data"]["batch_size"] = "${oc.decode:'17'}"
    torch.save(ckpt, tmp_path / "own.ckpt")
    with pytest.raises(UserError, match="data.batch_size"):
        load_run(tmp_path / "own.ckpt")
    assert load_run(tmp_path / "own.ckpt", trust=True).datamodule.hparams.batch_size == 17


def test_data_folders_are_this_machines():
    """A checkpoint's data folders move from its run's data dir to this command's (a
    colleague's checkpoint finds the data here; a file never chooses where litlab writes);
    one outside its run's data dir is refused unless this command names the folder."""
    from litlab.checkpointing import trust as data_folders

    stored = {
        "paths": {"data_dir": "/their/data"},
        "data": {"data_dir": "/their/data", "cache_dir": "/their/data/cache", "root": "/imgs"},
    }
    here = data_folders.here(stored, "/my/data", "x.ckpt")
    assert here["data"] == {"data_dir": "/my/data", "cache_dir": "/my/data/cache", "root": "/imgs"}
    assert here["paths"] == {"data_dir": "/my/data"}  # what a derived checkpoint stores
    for bad in ("/etc", "/their/data/../../etc", "relative/data"):
        evil = {**stored, "data": {"data_dir": bad}}
        with pytest.raises(UserError, match=r"data\.data_dir=.*\+data_overrides\.data_dir"):
            data_folders.here(evil, "/my/data", "x.ckpt")
        kept = data_folders.here(evil, "/my/data", "x.ckpt", overridden=("data_dir",))
        assert kept["data"]["data_dir"] == bad  # the command's override replaces it next
    no_paths = {"data": {"data_dir": "/their/data"}}
    with pytest.raises(UserError, match="outside the data dir of its run"):
        data_folders.here(no_paths, "/my/data", "x.ckpt")


# the configs whose resolved task config the project stores in checkpoints
STORED = [
    ("train", []),
    ("train", ["trainer=ddp", "logger=many", "tune=[lr,batch_size]", "profiler=simple"]),
    ("train", ["hparams_search=digits_cnn"]),  # an Optuna trial
    ("train", ["experiment=gat_cora"]),
    ("train", ["experiment=unet3d_hippocampus"]),
    ("federate", ["federate/strategy=fedprox", "federate.dp.mode=central"]),
    ("compress", ["ckpt_path=x.ckpt", "compress=[prune,distill,quantize]"]),
]


@pytest.mark.parametrize("name, overrides", STORED, ids=[" ".join(o) or n for n, o in STORED])
def test_every_config_the_project_stores_passes_the_check(name, overrides, tmp_path):
    """What train.py (DDP, Optuna trials), federate.py (the global checkpoint) and compress.py
    (a pruned net's step checkpoint) store is accepted as it is, by the trust check and by the
    command line's checks of the model and data rebuilt from it."""
    from omegaconf import OmegaConf, open_dict

    from litlab.checkpointing import trust
    from litlab.compression.prune import pruned_net_config
    from litlab.compression.steps import training_config
    from litlab.config import checkpoints
    from litlab.config.compose import compose

    run_cfg = OmegaConf.to_container(compose("train", output_dir=tmp_path), resolve=True)
    cfg = compose(name, overrides, output_dir=tmp_path)
    with open_dict(cfg):
        del cfg["hydra"]
    if name == "federate":  # as the recipe does before it stores the config
        from litlab.config.entries import FederateCommandSettings

        FederateCommandSettings.prepare(cfg)
    if name == "compress":  # a structured-pruning step's checkpoint: the net resized
        run_cfg["model"]["net"] = pruned_net_config(run_cfg["model"]["net"], {"conv": [8, 1]})
        stored = OmegaConf.to_container(training_config(cfg, run_cfg, 1), resolve=True)
    else:
        stored = OmegaConf.to_container(cfg, resolve=True)
    for key, value in stored["data"].items():  # the run wrote its split file
        if key.endswith("_file") and value:
            (tmp_path / value).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / value).touch()
    trust.check_is_data(stored, "stored.ckpt")
    root = stored["data"].get("root")
    if root is None or Path(root).is_dir():  # a data root absent here is refused (one line)
        checkpoints.check_stored(stored, "stored.ckpt")  # what eval/export/compress rebuild


@DIGITS
def test_resume_refuses_callback_states_that_name_files_elsewhere(digits_run, tmp_path):
    """A resumed ModelCheckpoint deletes the old best file its state names: a crafted state
    (`<dirpath>/../../victim`) is refused before training, the victim kept."""
    from litlab import train

    victims = Victims(tmp_path)
    ckpt = torch.load(digits_run.best, weights_only=True)
    state = next(v for v in ckpt["callbacks"].values() if "best_k_models" in v)
    escape = f"{state['dirpath']}/../../../../../../../..{victims.file}"
    state["best_k_models"] = {escape: state["best_model_score"]}
    state["kth_best_model_path"] = escape
    torch.save(ckpt, tmp_path / "evil.ckpt")
    logs = tmp_path / "logs"
    with pytest.raises(
        UserError, match=r"callback state ModelCheckpoint names the file .*victim\.txt outside"
    ):
        train([f"ckpt_path={tmp_path / 'evil.ckpt'}", f"paths.log_dir={logs}"])
    assert victims.untouched() and not any(p.is_file() for p in logs.rglob("*"))


@DIGITS
def test_a_split_file_the_checkpoint_names_is_never_created(digits_run, tmp_path):
    """A data file named by a checkpoint (a split file) is read when it is there, never
    written: a missing one is refused, naming the override that clears it."""
    from litlab.runs.rebuild import load_run

    ckpt = torch.load(digits_run.best, weights_only=True)
    ckpt["litlab_config"]["data"]["split_file"] = str(tmp_path / "made" / "planted.json")
    torch.save(ckpt, tmp_path / "evil.ckpt")
    with pytest.raises(UserError, match=r"data.split_file=.*\+data_overrides.split_file=null"):
        load_run(tmp_path / "evil.ckpt")
    assert not (tmp_path / "made").exists()
