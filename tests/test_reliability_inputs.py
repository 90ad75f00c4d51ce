"""Bad inputs of issue 18, grouped by the mechanism that refuses them, in process (a second
each): `validate.check` on a composed train config, or the build step. The end-to-end
form (exit 2, one line, no run dir) is in test_bad_inputs.py for one case of each group."""

import pytest

from litlab.config.compose import compose
from litlab.errors import UserError


def _check_train(cfg) -> None:
    """As train.py checks its config."""
    from litlab.config import validate

    validate.check(cfg, "train")


def refused(overrides, tmp_path) -> str:
    with pytest.raises(UserError) as err:
        _check_train(compose("train", overrides, output_dir=tmp_path / "run"))
    message = str(err.value)
    assert "\n" not in message
    return message


# bounds that litlab's classes annotate (typing.Annotated with annotated_types)
ANNOTATED = [
    (["seed=-5"], "an integer in [0, 4294967295]"),
    (["seed=99999999999"], "an integer in [0, 4294967295]"),
    (["model.label_smoothing=2"], "a probability in [0, 1)"),
    (["model.ema_decay=1.5"], "between 0 and 1"),
    (["model.mixup_alpha=-1"], ">= 0"),
    (["model.net.channels=[]"], "at least 1 entry"),
    (["model.net.channels=[8,0]"], "integers >= 1"),
    (["model.net.dropout=1"], "a probability in [0, 1)"),
    (["data.batch_size=0"], "integer >= 1"),
    (["data.test_fraction=1"], "between 0 and 1 (exclusive)"),
    (["model=gnn", "model.net.num_layers=0"], "integer >= 1"),
    (["model=gnn", "model.net.hidden_channels=0"], "integer >= 1"),
    (["model=gnn", "model.net.conv=foo"], "gcn | gat | sage | gin | mlp"),
    (["model=gnn", "data=mutag", "data.num_folds=1"], "integer >= 2"),
    (["model=gnn", "data=cora", "data.split=bogus"], "public | full | geom-gcn | random"),
    (["model=unet3d", "data.patch_size=[32,32]"], "exactly 3 entries"),
    (["model=unet3d", "model.net.dropout=-0.1"], "a probability in [0, 1)"),
    (["model=resnet3d", "data=phantom_cls", "model.net.depth=11"], "10 | 18 | 34"),
]
# bounds declared for the classes of other libraries (config.models.EXTERNAL), by class
EXTERNAL = [
    (["model.scheduler.T_max=0"], "integer >= 1"),
    (
        ["trainer.max_epochs=-1"],
        (
            "trainer.max_epochs=-1 has the wrong type or value; valid: "
            "an integer >= 1 (used as model.scheduler.T_max)"
        ),
    ),
    (
        ["model.optimizer.lr=fast"],
        ("model.optimizer.lr=fast has the wrong type or value; valid: a learning rate > 0"),
    ),
    (["trainer.gradient_clip_val=-1"], ">= 0 or null"),
    (["trainer.num_sanity_val_steps=-5"], "-1 for all batches"),
    (["callbacks.early_stopping.patience=-1"], "integer >= 0"),
    (["callbacks.early_stopping.mode=dynamic"], "min or max"),
    (
        [
            "callbacks=[default,joint_selection]",
            "++callbacks.joint_checkpoint.monitors={val/acc: best}",
        ],
        "use min or max",
    ),
    (["trainer.limit_val_batches=-0.5"], "a fraction in [0, 1]"),
]
# issue 34: a node the entry point builds from, deleted on the command line or nulled
REQUIRED_NODES = [
    (["~data"], "data is required by src/train.py (deleted with ~data"),
    (["~trainer"], "trainer is required by src/train.py"),
    (["~model"], "model is required by src/train.py"),
    (["~model.optimizer"], "model.optimizer is required by src/train.py"),
    (["~model.net"], "model.net is required by src/train.py"),
    (["model.optimizer=null"], "valid: an optimizer node"),
    (["~data._target_"], "data is required by src/train.py"),
    # a key other keys read (`optimized_metric: ${model.monitor}`), deleted
    (["~model.monitor"], "optimized_metric reads model.monitor, which is not in the config"),
    (["~seed"], "data.seed reads seed, which is not in the config (deleted with ~seed?)"),
    (["~model.monitor_mode"], "callbacks.model_checkpoint.mode reads model.monitor_mode"),
]
# issue 34: every float is finite, rates and factors bounded above (EXTERNAL, litlab.bounds):
# one composed command per kind of node here, the full table node by node below
NON_FINITE = [
    (["model.optimizer.lr=inf"], "model.optimizer.lr=inf has the wrong type or value; valid: "),
    (["model.optimizer.lr=1e30"], "a learning rate > 0 and <= 10"),
    (["model.optimizer.weight_decay=inf"], "model.optimizer.weight_decay=inf"),
    (["+model.optimizer.betas=[0.9,1.5]"], "two numbers in [0, 1)"),
    (["model=resnet18", "model.optimizer.momentum=2"], "model.optimizer.momentum=2"),
    (["+model.scheduler.eta_min=inf"], "model.scheduler.eta_min=inf"),
    (["trainer.gradient_clip_val=inf"], "trainer.gradient_clip_val=inf"),
    (["model.mixup_alpha=inf"], "model.mixup_alpha=inf"),
    (["data.num_workers=100000"], "4 per CPU of this machine"),
]
INF, NAN = float("inf"), float("nan")
# (target, key, value): refused by `targets.check_node` (no composition: microseconds each)
NODES = [
    ("torch.optim.AdamW", "lr", NAN),
    ("torch.optim.AdamW", "lr", 11.0),
    ("torch.optim.AdamW", "lr", -INF),
    ("torch.optim.AdamW", "weight_decay", NAN),
    ("torch.optim.AdamW", "weight_decay", 2.0),
    ("torch.optim.AdamW", "eps", -INF),
    ("torch.optim.AdamW", "betas", [0.9, NAN]),
    ("torch.optim.AdamW", "betas", [0.9]),
    ("torch.optim.SGD", "momentum", INF),
    ("torch.optim.SGD", "dampening", 1.5),
    ("torch.optim.RMSprop", "alpha", 1.0),
    ("torch.optim.lr_scheduler.CosineAnnealingLR", "T_max", INF),
    ("torch.optim.lr_scheduler.StepLR", "gamma", 2.0),
    ("torch.optim.lr_scheduler.OneCycleLR", "max_lr", INF),
    ("torch.optim.lr_scheduler.OneCycleLR", "pct_start", 1.5),
    ("torch.optim.lr_scheduler.ReduceLROnPlateau", "factor", NAN),
    ("lightning.pytorch.Trainer", "gradient_clip_val", NAN),
    ("lightning.pytorch.Trainer", "max_epochs", -3),
    ("lightning.pytorch.Trainer", "accumulate_grad_batches", INF),
    ("lightning.pytorch.Trainer", "limit_train_batches", NAN),
    ("lightning.pytorch.Trainer", "val_check_interval", -0.5),
    ("lightning.pytorch.callbacks.EarlyStopping", "min_delta", INF),
    ("litlab.domains.vision.module.ImageClassifier", "label_smoothing", NAN),
    ("litlab.domains.medical3d.module.VolumeSegmenter", "dice_weight", INF),
    ("litlab.domains.vision.data.DigitsDataModule", "batch_size", INF),
    ("litlab.domains.vision.data.DigitsDataModule", "val_fraction", NAN),
]
# issue 34: precision against the hardware (this machine's tests run on its CPU)
PRECISION = [
    (
        ["trainer.accelerator=cpu", f"trainer.precision={p}"],
        f"trainer.precision={p} is not supported on CPU",
    )
    for p in ("bf16-true", "16-true", "16-mixed", "transformer-engine")
]
# rules a class declares across its parameters (check_settings)
DECLARED = [
    (
        ["model=gnn", "data=mutag", "data.fold=10"],
        "data.fold=10 is not valid; choose 0 to 9 (data.num_folds=10)",
    ),
    (
        ["model=gnn", "model.net.conv=gat", "model.net.heads=3"],
        "not a multiple of model.net.heads=3",
    ),
    (["model=unet3d", "model.net.strides=[2,2]"], "one entry fewer"),
    (["model=gnn", "data=cora", "data.name=Foo"], "valid: Cora, CiteSeer, PubMed"),
    (["model=gnn", "model.net.act=foo"], "not an activation PyG knows"),
    (["model=gnn", "model.net.norm=foo"], "not a normalization PyG knows"),
]
# across groups: what the run as a whole needs
ACROSS = [
    (["model.monitor=val/nope"], "valid: val/acc, val/f1, val/loss"),
    (["callbacks.early_stopping.monitor=val/accuracy"], "is not a metric ImageClassifier logs"),
    (["model=unet3d", "model.monitor=val/acc"], "val/dice"),
    (["trainer.limit_val_batches=0"], "never validates"),
    (["train=false"], "pass ckpt_path="),
    (["trainer.limit_train_batches=0"], "trains nothing"),
]


@pytest.mark.parametrize(
    "overrides,words", ANNOTATED + EXTERNAL + DECLARED + ACROSS + REQUIRED_NODES + NON_FINITE
)
def test_refused_before_anything_is_built(overrides, words, tmp_path):
    assert words in refused(overrides, tmp_path)


@pytest.mark.parametrize("target,key,value", NODES)
def test_non_finite_and_out_of_range_values_are_refused_node_by_node(target, key, value):
    import re

    from litlab.config.messages import node_errors

    errors = node_errors("node", {"_target_": target, key: value}, {})
    assert re.match(rf"^node\.{key}=.* has the wrong type or value; valid: ", errors[0]), errors


@pytest.mark.parametrize("overrides,words", PRECISION)
def test_precision_the_cpu_cannot_run_is_refused(overrides, words, tmp_path):
    assert words in refused(overrides, tmp_path)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.optimizer.lr=10"],
        ["+model.optimizer.betas=[0.0,0.999]", "model.optimizer.weight_decay=1"],
        ["model=resnet18", "model.optimizer.momentum=0.999"],
        ["trainer.accelerator=cpu", "trainer.precision=bf16-mixed"],
        ["trainer.gradient_clip_val=1e3", "+trainer.val_check_interval=0.5"],
    ],
)
def test_bounds_at_their_edges_are_accepted(overrides, tmp_path):

    _check_train(compose("train", overrides, output_dir=tmp_path / "run"))


def test_folders_a_datamodule_reads_are_checked_before_it_is_built(tmp_path):
    (tmp_path / "one" / "cat").mkdir(parents=True)
    assert "needs at least 2 class sub-folders, found 1" in refused(
        ["data=imagefolder", f"data.root={tmp_path / 'one'}"], tmp_path
    )
    (tmp_path / "vols" / "imagesTr").mkdir(parents=True)
    (tmp_path / "vols" / "labelsTr").mkdir()
    (tmp_path / "vols" / "imagesTr" / "a.txt").touch()
    assert "found 0 image/label pairs" in refused(
        ["model=unet3d", "data=nifti", f"data.root={tmp_path / 'vols'}"], tmp_path
    )


@pytest.mark.parametrize(
    "overrides",
    [
        # a key name alone no longer decides: a future mode/client_fraction is the target's business
        [
            "+callbacks.export._target_=faults.Exporter",
            "+callbacks.export.mode=dynamic",
            "+callbacks.export.client_fraction=1.0",
        ],
        ["model=gnn", "data=mutag", "data.val_fraction=0", "callbacks.model_checkpoint=null"],  # Xu
        ["trainer.max_epochs=-1", "model.scheduler=null"],
        ["model.monitor=train/loss", "model.monitor_mode=min", "trainer.limit_val_batches=0"],
    ],
)
def test_valid_inputs_are_accepted(overrides, tmp_path):

    _check_train(compose("train", overrides, output_dir=tmp_path / "run"))


def test_build_errors_become_one_line(tmp_path):
    """Anything raised while a group is built: one UserError line, Hydra's wrapper removed."""
    from litlab.config import build

    cfg = compose("train", ["data._target_=faults.BrokenData"], output_dir=tmp_path / "run")
    with pytest.raises(
        UserError,
        match=r"^data \(faults.BrokenData\) cannot be built: the disk "
        r"said no$",
    ):
        build.datamodule(cfg)
    cfg = compose(
        "train", ["model=unet3d", "data.patch_size=[30,30,30]"], output_dir=tmp_path / "r2"
    )
    with pytest.raises(
        UserError,
        match=r"data.patch_size=\[30, 30, 30\] .* multiple of 8 "
        r"\(e.g. \[32, 32, 32\]\)",
    ):
        build.model(cfg, build.datamodule(cfg))


def test_too_many_folds_for_the_data(tmp_path, shared_data):
    from litlab.config import build

    data = shared_data("TUDataset/MUTAG").parents[1]
    cfg = compose(
        "train",
        ["model=gnn", "data=mutag", f"paths.data_dir={data}", "data.num_folds=1000"],
        output_dir=tmp_path / "run",
    )
    with pytest.raises(UserError, match="data.num_folds=1000 is too many for MUTAG .* use 2 to 63"):
        build.model(cfg, build.datamodule(cfg))


def test_unreadable_image_is_named_when_the_dataset_is_built(tmp_path):
    from PIL import Image

    from litlab.domains.vision.data import ImageFolderDataModule

    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        for i in range(5):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(tmp_path / name / f"{i}.png")
    (tmp_path / "dog" / "broken.png").write_bytes(b"not a png at all")
    dm = ImageFolderDataModule(root=str(tmp_path), image_size=8)
    with pytest.raises(UserError, match=r"cannot read image .*dog/broken.png"):
        dm.setup()


def test_an_unlabelled_training_image_is_refused_by_name(tmp_path):
    from litlab.domains.medical3d.nifti import find_pairs

    (tmp_path / "imagesTr").mkdir()
    (tmp_path / "labelsTr").mkdir()
    for i in range(4):
        (tmp_path / "imagesTr" / f"case_{i}.nii.gz").touch()
    for i in range(3):
        (tmp_path / "labelsTr" / f"case_{i}.nii.gz").touch()
    with pytest.raises(UserError) as err:
        find_pairs(tmp_path)
    message = str(err.value)
    assert "imagesTr/case_3.nii.gz has no label in labelsTr/ (1 of 4 images" in message
    assert "\n" not in message


def test_a_split_smaller_than_the_classes_is_warned_about(caplog):
    from litlab.data import stratified_split

    labels = [i % 10 for i in range(1000)]
    _, held = stratified_split(labels, 0.002, seed=0)
    assert len(held) == 2
    assert any("leaves 2 of 1000 samples" in r.getMessage() for r in caplog.records)


def test_a_failed_download_leaves_no_folder_and_prints_nothing(tmp_path, capsys):
    from litlab.utils.files import fetching

    raw = tmp_path / "data" / "MNIST" / "raw"
    with pytest.raises(OSError), fetching(raw):
        raw.mkdir(parents=True)
        (tmp_path / "data" / ".litlab.lock").touch()
        print("Downloading https://example.invalid/train-images-idx3-ubyte.gz")
        raise OSError("offline")
    assert not (tmp_path / "data").exists()
    assert capsys.readouterr().out == ""


def test_a_callback_or_logger_that_cannot_be_built_is_one_line(tmp_path):
    """build.trainer: an entry of callbacks/logger (or the Trainer) whose constructor fails is
    one line naming the entry, not Hydra's multi-line "Error in call to target"."""
    from litlab.config import build

    cfg = compose(
        "train",
        ["+callbacks.extra._target_=lightning.pytorch.callbacks.EarlyStopping"],
        output_dir=tmp_path,
    )
    with pytest.raises(UserError) as err:
        build.trainer(cfg)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(
        "callbacks.extra (lightning.pytorch.callbacks.EarlyStopping) cannot be built:"
    ), line


@pytest.mark.parametrize(
    "overrides,first,second",
    [  # two of the run's own keys or name-known bounds (no import); two targets' values
        (
            ["seed=-5", "trainer.max_epochs=0"],
            "seed=-5 has the wrong type or value; valid: an integer in [0, 4294967295]",
            "trainer.max_epochs=0 has the wrong type or value",
        ),
        (
            ["data.batch_size=0", "model.net.dropout=1", "+model.net.chanels=[8]"],
            "data.batch_size=0 has the wrong type or value; valid: an integer >= 1",
            "model.net.dropout=1 has the wrong type or value; valid: a probability in [0, 1)",
        ),
    ],
)
def test_every_error_of_a_command_is_told_in_its_one_line(overrides, first, second, tmp_path):
    """The first error reads as it would alone; the others follow it, so one run of the
    command names every bad setting of a stage."""
    message = refused(overrides, tmp_path)
    assert message.startswith(first + " (and "), message
    assert second in message.split(" more: ", 1)[1], message
