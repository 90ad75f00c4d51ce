"""Checkpoints eval/export read are files from elsewhere (issue #34): a wrong structure, NaN
weights or a stored config the command line would refuse is one line and exit 2 with nothing
written; a data folder the user typed when training here is accepted, one named only by a file
is not; a run dir holding a link out of it is never resumed nor written through.

One tiny digits run (1 epoch, trained once for the module, `data.data_dir` set on its command
line) is the base: crafted files are mutated copies of its checkpoint. Run dirs of resumes and
their links: also tests/test_run_dirs.py."""

import copy
import os
import shutil

import pytest
import torch
from helpers.runs import command_in_process, fingerprint, run_dirs

from litlab.errors import UserError

C = "litlab_config"
TINY = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "data.num_workers=0",
    "test=false",
]
FAST_EVAL = ["trainer.limit_test_batches=1", "predictions=false", "extras.print_config=false"]
pytestmark = pytest.mark.xdist_group("tiny_digits_elsewhere")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(run dir, its checkpoint, the data folder typed on its command line): train.py's command
    (`cli.run(main)`, argv and all: Hydra makes and records the run dir) in this process."""
    base = tmp_path_factory.mktemp("tiny")
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    logs = base / "logs"
    code, _, _ = command_in_process("train.py", [*TINY, f"data.data_dir={elsewhere}"], logs)
    assert code == 0
    run = run_dirs(logs)[0]
    return run, next((run / "checkpoints").glob("epoch_*.ckpt")), elsewhere


def _sd(c):
    return c["state_dict"]


def _nan(c, key="net.head.3.weight"):
    _sd(c)[key].view(-1)[0] = float("nan")


# class -> case -> (edit of the loaded checkpoint, what the one line names)
CASES = {
    # the structure of the dict
    "state_dict a list": (lambda c: c.update(state_dict=list(_sd(c).values())), "is a list"),
    "state_dict strings": (lambda c: c.update(state_dict=dict.fromkeys(_sd(c), "w")), "a str"),
    "state_dict nested": (lambda c: _sd(c).update({"net.head.3.bias": {"a": 1}}), "a dict"),
    "state_dict int key": (lambda c: _sd(c).update({3: torch.zeros(1)}), "the key 3"),
    "state_dict None": (lambda c: c.update(state_dict=None), "is a NoneType"),
    "config a list": (lambda c: c.update({C: [1]}), "is a list"),
    "provenance not a dict": (lambda c: c.update(litlab_provenance="x"), "provenance"),
    "provenance code a list": (lambda c: c["litlab_provenance"].update(code=[1]), "code"),
    "provenance commit a number": (
        lambda c: c["litlab_provenance"]["code"].update(commit=5, tree_sha256="x"),
        "code.commit of type int",
    ),
    # the weights against the model the stored config builds
    "missing key": (lambda c: _sd(c).pop("net.head.3.bias"), "lacks net.head.3.bias"),
    "wrong shape": (
        lambda c: _sd(c).update({"net.head.3.bias": torch.zeros(11)}),
        "net.head.3.bias has shape [11] there, [10] here",
    ),
    "extra huge tensor": (
        lambda c: _sd(c).update({"net.evil": torch.zeros(4_000_000)}),
        "unexpected entry net.evil",
    ),
    "integer weights": (
        lambda c: _sd(c).update({"net.head.3.bias": torch.zeros(10, dtype=torch.long)}),
        "torch.int64",
    ),
    "another net": (
        lambda c: c[C]["model"]["net"].update(channels=[8, 16]),
        "net.features.0.0.weight has shape [32, 1, 3, 3] there, [8, 1, 3, 3] here",
    ),
    # weights that are not finite
    "NaN weight": (_nan, "not finite: net.head.3.weight"),
    "inf running var": (
        lambda c: _sd(c)["net.features.0.1.running_var"].fill_(float("inf")),
        "not finite: net.features.0.1.running_var",
    ),
    "NaN bias": (lambda c: _nan(c, "net.features.1.1.bias"), "not finite: net.features.1.1.bias"),
    # the stored config, by the command line's checks
    "no model": (lambda c: c[C].pop("model"), "has no model node"),
    "data a string": (lambda c: c[C].update(data="digits"), "has a str as its data node"),
    "model a list": (lambda c: c[C].update(model=[1]), "has a list as its model node"),
    "net a list": (lambda c: c[C]["model"].update(net=[1]), "no model.net node"),
    "batch size 0": (lambda c: c[C]["data"].update(batch_size=0), "data.batch_size=0"),
    "channels []": (lambda c: c[C]["model"]["net"].update(channels=[]), "channels=[]"),
    "label smoothing 5": (
        lambda c: c[C]["model"].update(label_smoothing=5),
        "model.label_smoothing=5",
    ),
    "unknown monitor": (lambda c: c[C]["model"].update(monitor="val/nope"), "val/nope"),
    "monitor without split": (lambda c: c[C]["model"].update(monitor="acc"), "model.monitor=acc"),
    "monitor mode": (lambda c: c[C]["model"].update(monitor_mode="up"), "monitor_mode=up"),
    "negative lr": (lambda c: c[C]["model"]["optimizer"].update(lr=-1.0), "optimizer.lr=-1.0"),
    "dropout 2": (lambda c: c[C]["model"]["net"].update(dropout=2.0), "dropout=2.0"),
    "unknown model key": (lambda c: c[C]["model"].update(foo=1), "unknown key model.foo"),
    # names that cannot be located: litlab's one line, not Hydra's logged error beside it
    "net module missing": (
        lambda c: c[C]["model"]["net"].update(_target_="litlab.domains.vision.nets.gone.Net"),
        "model.net._target_=litlab.domains.vision.nets.gone.Net cannot be imported",
    ),
    "old name under a moved module": (
        lambda c: c[C]["model"]["net"].update(_target_="litlab.models.nets.cnn.torch.load"),
        "cannot be imported",
    ),
    "test fraction 1.5": (
        lambda c: c[C]["data"].update(test_fraction=1.5),
        "data.test_fraction=1.5",
    ),
    "data of a graph kind": (
        lambda c: c[C]["data"].update(_target_="litlab.domains.graph.data.PlanetoidDataModule"),
        "node",
    ),
}
# one case of each class stays in the fast suite (through eval; export reads the same checks:
# its NaN case is the command test below); the rest run in the slow stage
FAST = ("state_dict a list", "wrong shape", "NaN weight", "label smoothing 5", "data a string")


def _crafted(tiny, tmp_path, case: str):
    """A copy of the tiny run's checkpoint, outside its run dir, with `case` applied (its
    data folder back in its run's data dir, so only the case is wrong)."""
    ckpt = torch.load(tiny[1], weights_only=True)
    ckpt = copy.deepcopy(ckpt)
    ckpt[C]["data"]["data_dir"] = ckpt[C]["paths"]["data_dir"]
    CASES[case][0](ckpt)
    path = tmp_path / "crafted.ckpt"
    torch.save(ckpt, path)
    return path


def _eval(path, logs):
    from litlab import evaluate

    evaluate([f"ckpt_path={path}", f"paths.log_dir={logs}", *FAST_EVAL])


def _export(path, logs):
    from litlab.export.recipe import export_checkpoint

    export_checkpoint(path, logs / "export", formats=["onnx"], latency={"batch_sizes": []})


ENTRIES = {"eval": _eval, "export": _export}
PARAMS = [
    pytest.param(case, entry, marks=() if case in FAST and entry == "eval" else pytest.mark.slow)
    for case in CASES
    for entry in ENTRIES
]


@pytest.mark.parametrize("case, entry", PARAMS)
def test_a_malformed_checkpoint_is_one_line_and_writes_nothing(tiny, tmp_path, case, entry):
    path = _crafted(tiny, tmp_path, case)
    logs = tmp_path / "logs"
    with pytest.raises(UserError) as err:
        ENTRIES[entry](path, logs)
    line = str(err.value)
    assert "\n" not in line and CASES[case][1] in line, line
    assert not any(p.is_file() for p in logs.rglob("*")), "something was written"


def test_the_unmodified_copy_passes_the_same_checks(tiny, tmp_path):
    """The checks refuse the cases, not the run: an untouched copy loads and evaluates."""
    from litlab.runs.rebuild import load_run

    ckpt = torch.load(tiny[1], weights_only=True)
    ckpt[C]["data"]["data_dir"] = ckpt[C]["paths"]["data_dir"]
    torch.save(ckpt, tmp_path / "copy.ckpt")
    run = load_run(tmp_path / "copy.ckpt")
    assert torch.equal(run.model.net.head[3].bias, ckpt["state_dict"]["net.head.3.bias"])


def _with_old_names(tiny, tmp_path):
    """The checkpoint as litlab wrote it before each domain became one folder: its stored
    config names litlab.data.vision and litlab.models.nets.cnn."""
    from litlab.checkpointing.load import MOVED

    ckpt = torch.load(tiny[1], weights_only=True)
    ckpt[C]["data"]["data_dir"] = ckpt[C]["paths"]["data_dir"]
    old = {}
    for before, now in MOVED.items():  # the first name each module had
        old.setdefault(now, before)
    for node in (ckpt[C]["data"], ckpt[C]["model"], ckpt[C]["model"]["net"]):
        module, _, name = node["_target_"].rpartition(".")
        node["_target_"] = f"{old.get(module, module)}.{name}"
    assert ckpt[C]["model"]["net"]["_target_"] == "litlab.models.nets.cnn.SmallCNN"
    torch.save(ckpt, tmp_path / "old.ckpt")
    return tmp_path / "old.ckpt"


def test_a_checkpoint_naming_the_modules_before_the_domains_moved_still_loads(tiny, tmp_path):
    from litlab.runs.rebuild import load_run

    run = load_run(_with_old_names(tiny, tmp_path))
    assert type(run.model).__module__ == "litlab.domains.vision.module"
    assert type(run.model.net).__module__ == "litlab.domains.vision.nets"


def test_only_whole_moved_modules_are_renamed():
    """The table renames module paths litlab shipped, nothing else: a name that only starts
    like one, or a module of the same name elsewhere, stays what it is (and the trust check
    judges it)."""
    from litlab.checkpointing.load import renamed

    config = {
        "model": {"_target_": "litlab.models.vision.ImageClassifier"},
        "data": {"_target_": "litlab.data.visionx.Digits"},
        "net": {"base_target": "litlab.models.nets.cnn.SmallCNN", "x": [{"_target_": "os.system"}]},
        "deep": {"_target_": "litlab.data.vision.evil.Thing"},
    }
    assert renamed(config) == {
        "model": {"_target_": "litlab.domains.vision.module.ImageClassifier"},
        "data": {"_target_": "litlab.data.visionx.Digits"},
        "net": {
            "base_target": "litlab.domains.vision.nets.SmallCNN",
            "x": [{"_target_": "os.system"}],
        },
        "deep": {"_target_": "litlab.data.vision.evil.Thing"},
    }


@pytest.mark.parametrize(
    "script, case",
    [
        ("export.py", "NaN weight"),
        ("eval.py", "net module missing"),
        pytest.param("eval.py", "wrong shape", marks=pytest.mark.slow),
        pytest.param("eval.py", "label smoothing 5", marks=pytest.mark.slow),
    ],
)
def test_the_command_exits_2_with_one_line(tiny, tmp_path, script, case, capfd):
    """As a user runs it (the command's `cli.run(main)`, argv and all, in this process: each
    command as a process is in tests/test_refusals.py): exit 2, one line on stderr, no run dir
    (export: no model file; the NaN checkpoint used to export with an OOD threshold of nan and
    exit 0)."""
    path = _crafted(tiny, tmp_path, case)
    logs = tmp_path / "logs"
    code, out, err = command_in_process(script, [f"ckpt_path={path}"], logs, capfd, quiet=False)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: ") and CASES[case][1] in lines[0], lines
    assert not any(f.is_file() for f in logs.rglob("*")), "a run dir or file was left"
    assert "nan" not in out


@pytest.mark.slow  # an export through the OOD measurement (~5 s)
def test_finite_weights_that_overflow_export_no_nan_threshold(tiny, tmp_path):
    """Weights of 3e38 pass the finite check but overflow the logits: export refuses to
    write a file with an out-of-distribution threshold of nan."""
    ckpt = torch.load(tiny[1], weights_only=True)
    ckpt[C]["data"]["data_dir"] = ckpt[C]["paths"]["data_dir"]
    ckpt["state_dict"]["net.head.3.weight"].fill_(3e38)
    torch.save(ckpt, tmp_path / "overflow.ckpt")
    with pytest.raises(UserError, match="not finite .*threshold nan"):
        _export(tmp_path / "overflow.ckpt", tmp_path / "logs")
    assert not (tmp_path / "logs").exists()


# ------------------------------------------------------------------ data folders
def _load(path, **kw):
    from litlab.runs.rebuild import load_run

    return load_run(path, data_dir=str(path.parent / "this_machines_data"), **kw)


def test_a_data_folder_typed_when_training_here_is_accepted(tiny):
    """`train.py data.data_dir=/elsewhere` recorded in its run dir: the checkpoint loads with
    that folder and no extra flag (it was refused until +data_overrides.data_dir=...)."""
    run, ckpt, elsewhere = tiny
    assert f"data.data_dir={elsewhere}" in (run / ".hydra" / "overrides.yaml").read_text()
    assert _load(ckpt).config.data.data_dir == str(elsewhere)


def _copy_run(tiny, tmp_path, name="copy", here=True):
    """A copy of the tiny run dir; `here`: its record says it ran there (as a run made in
    that folder would), else it names the original folder (a run dir copied from elsewhere)."""
    run = tmp_path / "logs" / "train" / "runs" / name
    shutil.copytree(tiny[0], run)
    if here:
        hydra = run / ".hydra" / "hydra.yaml"
        hydra.write_text(hydra.read_text().replace(str(tiny[0]), str(run)))
    return run, run / "checkpoints" / tiny[1].name


def test_a_relative_data_folder_typed_when_training_counts_from_anywhere(
    tiny, tmp_path, monkeypatch
):
    """`train.py data.data_dir=elsewhere` (relative) stores it absolute from the folder the
    run started in (Hydra's runtime.cwd beside the record): evaluated from another folder,
    the record still names the stored folder (issue 48: stored paths travel)."""
    from omegaconf import OmegaConf

    run2, ckpt2 = _copy_run(tiny, tmp_path)
    elsewhere = tiny[2]
    (run2 / ".hydra" / "overrides.yaml").write_text("- data.data_dir=elsewhere\n")
    hydra = OmegaConf.load(run2 / ".hydra" / "hydra.yaml")
    hydra.hydra.runtime.cwd = str(elsewhere.parent)
    OmegaConf.save(hydra, run2 / ".hydra" / "hydra.yaml")
    monkeypatch.chdir(tmp_path)
    assert _load(ckpt2).config.data.data_dir == str(elsewhere)


def test_a_folder_named_only_by_the_file_is_still_refused(tiny, tmp_path):
    """The same file copied out of its run dir, its run dir copied as a whole (its record
    names the original folder), a run dir whose checkpoints/ links elsewhere, a file planted
    in the run dir naming another folder, a recorded folder that no longer exists: refused."""
    _, ckpt, elsewhere = tiny
    copied = tmp_path / "copied.ckpt"
    shutil.copy(ckpt, copied)
    other = tmp_path / "other"
    other.mkdir()
    run2, ckpt2 = _copy_run(tiny, tmp_path)  # a run dir of the user's, made where it is
    assert _load(ckpt2).config.data.data_dir == str(elsewhere)
    crafted = torch.load(ckpt, weights_only=True)
    crafted[C]["data"]["data_dir"] = str(other)  # a file placed inside the real run dir
    torch.save(crafted, run2 / "checkpoints" / "planted.ckpt")
    outside = tmp_path / "outside"
    shutil.copytree(run2 / "checkpoints", outside)
    linked = tmp_path / "logs" / "train" / "runs" / "linked"
    shutil.copytree(run2, linked, ignore=shutil.ignore_patterns("checkpoints"))
    hydra = linked / ".hydra" / "hydra.yaml"
    hydra.write_text(hydra.read_text().replace(str(run2), str(linked)))
    (linked / "checkpoints").symlink_to(outside)  # its checkpoints are not in the run dir
    gone = tmp_path / "gone"
    gone.mkdir()
    (run2 / ".hydra" / "overrides.yaml").write_text(f"- data.data_dir={gone}\n")
    crafted[C]["data"]["data_dir"] = str(gone)
    torch.save(crafted, run2 / "checkpoints" / "gone.ckpt")
    gone.rmdir()
    _, unpacked = _copy_run(tiny, tmp_path, "unpacked", here=False)
    refused = [
        copied,
        unpacked,
        run2 / "checkpoints" / "planted.ckpt",
        linked / "checkpoints" / ckpt.name,
        run2 / "checkpoints" / "gone.ckpt",
    ]
    for path in refused:
        with pytest.raises(UserError, match=r"data\.data_dir=.*\+data_overrides\.data_dir="):
            _load(path)
    assert not other.exists() or not any(other.iterdir())
    assert not gone.exists(), "a folder the file named was created"
    # this command's own choice still wins
    mine = tmp_path / "mine"
    mine.mkdir()
    assert _load(copied, data_overrides={"data_dir": str(mine)}).config.data.data_dir == str(mine)


def test_a_run_dir_of_another_user_is_not_a_record(tiny, tmp_path, monkeypatch):
    """The record is only read from run dirs this user owns."""
    from litlab.checkpointing import trust as data_folders

    _, ckpt2 = _copy_run(tiny, tmp_path)
    assert data_folders.user_chosen(ckpt2) == {"data.data_dir": str(tiny[2])}
    monkeypatch.setattr(os, "getuid", lambda: os.stat(ckpt2).st_uid + 1)
    assert data_folders.user_chosen(ckpt2) == {}


@pytest.mark.slow  # three commands on the same checkpoint (eval, export, compress)
def test_eval_export_compress_accept_the_users_data_folder(tiny, tmp_path, capfd):
    """Each command's real `cli.run` (argv and all) in this process: what is checked is what
    they accept and write, not their process (each has its subprocess checks elsewhere)."""
    _, ckpt, elsewhere = tiny
    logs = tmp_path / "logs"
    for script, extra, made in (
        ("eval.py", FAST_EVAL, "metrics.json"),
        ("export.py", ["formats=[onnx]", "latency.batch_sizes=[]"], "model.onnx"),
        ("compress.py", ["compress=[quantize]"], "compress_report.md"),
    ):
        code, _, err = command_in_process(script, [f"ckpt_path={ckpt}", *extra], logs, capfd)
        assert code == 0, f"{script}: {err[-3000:]}"
        assert (run_dirs(logs, script[:-3])[0] / made).is_file()
    assert elsewhere.is_dir()


# ------------------------------------------------------------------ links out of a run dir
def _linked_run(tiny, tmp_path, entry: str):
    """A copy of the tiny run whose `entry` (a folder or file it writes) is a link to a copy
    outside the run dir."""
    run, _ = _copy_run(tiny, tmp_path)
    outside = tmp_path / "outside" / entry
    outside.parent.mkdir()
    shutil.move(run / entry, outside)
    (run / entry).symlink_to(outside)
    return run, outside.parent


@pytest.mark.parametrize(
    "entry",
    [
        "checkpoints",
        pytest.param("csv", marks=pytest.mark.slow),
        # refused by the run dir's location checks before this one (one line all the same)
        pytest.param(".hydra", marks=pytest.mark.slow),
        pytest.param("train.log", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("how", ["run dir", pytest.param("last", marks=pytest.mark.slow)])
def test_a_run_dir_linking_out_is_never_resumed(tiny, tmp_path, entry, how):
    from litlab import train

    run, outside = _linked_run(tiny, tmp_path, entry)
    before, before_run = fingerprint(outside), fingerprint(run)
    value = run if how == "run dir" else "last"
    with pytest.raises(UserError) as err:
        train([f"ckpt_path={value}", f"paths.log_dir={tmp_path / 'logs'}", *TINY[:1]])
    line = str(err.value)
    assert "\n" not in line and entry in line, line  # a link, or the log outside log_dir
    assert fingerprint(outside) == before, "written through the link"
    assert fingerprint(run) == before_run, "the run dir changed"


def test_checkpoints_are_never_written_through_a_linked_folder(tmp_path):
    from litlab.checkpointing.atomic_io import AtomicCheckpointIO

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "old.ckpt").write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").symlink_to(outside)
    io = AtomicCheckpointIO()
    with pytest.raises(UserError, match="checkpoints is a symbolic link"):
        io.save_checkpoint({"x": 1}, run / "checkpoints" / "last.ckpt")
    with pytest.raises(UserError, match="checkpoints is a symbolic link"):
        io.remove_checkpoint(run / "checkpoints" / "old.ckpt")
    assert sorted(p.name for p in outside.iterdir()) == ["old.ckpt"]
    (run / "inside").mkdir()  # a link that stays inside the run dir is fine
    (run / "ckpts").symlink_to(run / "inside")
    io.save_checkpoint({"x": 1}, run / "ckpts" / "last.ckpt")
    assert (run / "inside" / "last.ckpt").is_file()


def test_wandbs_own_links_out_of_its_earlier_runs_do_not_stop_a_resume(tmp_path):
    """wandb (offline too) links `wandb/offline-run-*/logs/debug-core.log` to ~/.cache/wandb and
    never writes into an earlier start's folder again (a resume makes a new one): that link is
    not a way out. The same folder, or `wandb` itself, linking out still is."""
    from litlab.checkpointing.atomic_io import links_out

    outside = tmp_path / "cache"
    outside.mkdir()
    (outside / "core-debug.log").write_text("log")
    run = tmp_path / "run"
    logs = run / "wandb" / "offline-run-20261202_010937-5e999b4d7780" / "logs"
    logs.mkdir(parents=True)
    (logs / "debug-core.log").symlink_to(outside / "core-debug.log")
    (run / "wandb" / "latest-run").symlink_to(logs.parent)
    assert links_out(run) is None
    (run / "wandb" / "debug-core.log").symlink_to(outside / "core-debug.log")  # not sealed
    assert links_out(run)[0].name == "debug-core.log"
    (run / "wandb" / "debug-core.log").unlink()
    (run / "wandb" / "run-20261202_010937-x").symlink_to(outside)  # the folder itself
    assert links_out(run)[0].name == "run-20261202_010937-x"
    shutil.rmtree(run / "wandb" / "offline-run-20261202_010937-5e999b4d7780")
    (run / "wandb" / "run-20261202_010937-x").unlink()
    shutil.move(run / "wandb", tmp_path / "wandb-elsewhere")
    (run / "wandb").symlink_to(tmp_path / "wandb-elsewhere")
    assert links_out(run)[0].name == "wandb"


@pytest.mark.parametrize(
    "case", ["NaN weight", pytest.param("extra huge tensor", marks=pytest.mark.slow)]
)
def test_train_resume_reads_the_checkpoint_through_the_same_checks(tiny, tmp_path, case):
    """train.py ckpt_path=<file>: NaN weights fail the check before training; an unexpected
    entry is named by the module's own check (Lightning's strict load was a traceback)."""
    from litlab import train

    path = _crafted(tiny, tmp_path, case)
    logs = tmp_path / "logs"
    with pytest.raises(UserError) as err:
        train([f"ckpt_path={path}", f"paths.log_dir={logs}", *TINY[:2], "data.num_workers=0"])
    line = str(err.value)
    assert "\n" not in line and CASES[case][1] in line, line
    assert not any(p.is_file() for p in logs.rglob("*")), "a run dir was left"
