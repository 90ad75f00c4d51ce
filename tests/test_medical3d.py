"""3D medical domain: what a user relies on. Phantoms are learnable (Dice, accuracy bars),
eval writes masks that line up with the inputs, and the NIfTI / MedMNIST loaders read real
layouts (a few Hippocampus cases; a locally written .npz)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.datafiles import write_medmnist_npz
from helpers.runs import TINY_SEG, require_shared, results, run_dirs

from litlab.config.compose import compose


# both in the slow stage (28 s and 38 s on 2 cores): make test trains and compresses a tiny
# UNet3D in process (test_compress_segmentation) and prunes its channels
@pytest.mark.parametrize(
    "epochs", [pytest.param(1, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)]
)
def test_unet3d_on_phantoms_then_eval_writes_aligned_masks(cli, tmp_path, epochs):
    """8 epochs (slow: ~1-4 min on 2 cores): Dice > 0.8 on held-out phantoms. Both: eval
    reproduces train's test Dice and writes one mask per test volume, with that volume's
    shape, and per-volume Dice to predictions.csv."""
    import nibabel as nib

    from litlab.domains.medical3d.volumes import phantom_shapes

    train = cli("train.py", *TINY_SEG, f"trainer.max_epochs={epochs}", timeout=600)
    if epochs >= 8:
        assert results(train.stdout)[0]["test/dice"] > 0.8, train.stdout[-1500:]
    run = run_dirs(tmp_path / "logs")[0]
    split = json.loads((run / "data_split.json").read_text())
    assert len(split["test"]) == 4 and not set(split["test"]) & set(split["train"])
    ckpt = next((run / "checkpoints").glob("epoch_*.ckpt"))

    cli("eval.py", f"ckpt_path={ckpt}", "extras.print_config=false", quiet=False)
    out = run_dirs(tmp_path / "logs", "eval")[0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test/dice"] == pytest.approx(results(train.stdout)[0]["test/dice"], abs=1e-4)
    rows = pd.read_csv(out / "predictions.csv")
    assert len(rows) == 4
    assert rows["dice"].mean() == pytest.approx(metrics["test/dice"], abs=1e-4)
    shapes = phantom_shapes(1, 24, 24, 3)
    for case in split["test"]:
        mask = nib.load(out / "masks" / f"{case}.nii.gz")
        assert mask.shape == shapes[int(case.removeprefix("case_"))]
        assert np.allclose(mask.affine, np.eye(4))
        assert set(np.unique(np.asarray(mask.dataobj))) <= {0, 1, 2}


@pytest.mark.slow  # make test's 5 minutes (343 s on the final tree of 2026-12-02): the slow stage runs it
def test_resnet3d_classifies_phantoms_well_above_chance(tmp_path):
    from litlab.recipes import train_and_test

    cfg = compose(
        "train",
        [
            "model=resnet3d",
            "data.num_volumes=160",
            "data.size=20",
            "data.size_jitter=2",
            "model.net.conv1_stride=1",
            "trainer.max_epochs=6",
            "logger=csv",
            "extras.print_config=false",
            "callbacks.rich_progress_bar=null",
            "seed=0",
        ],
        output_dir=tmp_path,
    )
    metrics = train_and_test(cfg).metrics
    assert metrics["test/acc"] >= 0.8, metrics  # chance is 0.5 (balanced nodule / no nodule)
    assert metrics["test/auroc"] >= 0.85, metrics


def test_incompatible_pair_fails_in_one_line(tmp_path):
    from litlab.config import build
    from litlab.errors import UserError

    cfg = compose("train", ["model=resnet3d", "data=phantom_seg"], output_dir=tmp_path)
    with pytest.raises(UserError) as err:
        build.check_compatible(cfg)
    assert "\n" not in str(err.value) and "phantom_cls" in str(err.value)
    assert "volume_classification" in str(err.value)


def test_phantoms_are_deterministic_and_vary_in_size():
    from litlab.domains.medical3d.volumes import phantom, phantom_shapes

    a, b = phantom(3, 5, (20, 22, 24)), phantom(3, 5, (20, 22, 24))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert set(np.unique(a[1])) == {0, 1, 2} and a[0].shape == (1, 20, 22, 24)
    assert len(set(phantom_shapes(0, 10, 32, 4))) > 1


def test_sliding_window_output_matches_odd_input_shape():
    from litlab.domains.medical3d.module import VolumeSegmenter
    from litlab.domains.medical3d.nets import unet3d

    net = unet3d(1, 3, channels=(4, 8), strides=(2,), num_res_units=0)
    model = VolumeSegmenter(net, torch.optim.Adam, num_classes=3, patch_size=(16, 16, 16))
    with torch.no_grad():
        out = model.infer(torch.randn(1, 1, 23, 29, 11))
    assert out.shape == (1, 3, 23, 29, 11)


def test_written_mask_keeps_input_affine_and_header(tmp_path):
    import nibabel as nib

    from litlab.domains.medical3d.nifti import write_mask

    affine = np.array([[0, -1.5, 0, 10], [2.0, 0, 0, -4], [0, 0, 1.2, 7], [0, 0, 0, 1]])
    source = nib.Nifti1Image(np.random.rand(7, 9, 5).astype(np.float32), affine)
    source.header.set_xyzt_units("mm", "sec")
    nib.save(source, tmp_path / "case.nii.gz")
    mask = (np.arange(7 * 9 * 5).reshape(7, 9, 5) % 3).astype(np.uint8)
    write_mask(mask, tmp_path / "mask.nii.gz", affine, like=tmp_path / "case.nii.gz")
    back = nib.load(tmp_path / "mask.nii.gz")
    assert np.allclose(back.affine, affine) and back.header.get_zooms() == source.header.get_zooms()
    assert back.header.get_xyzt_units() == ("mm", "sec")
    assert np.array_equal(np.asarray(back.dataobj), mask)


def hippocampus_cases(dst: Path, count: int, images="imagesTr", labels="labelsTr") -> Path:
    src = require_shared("Hippocampus")
    names = sorted(p.name for p in (src / "images").iterdir())[:count]
    for sub, folder in ((images, "images"), (labels, "labels")):
        (dst / sub).mkdir(parents=True)
        for name in names:
            shutil.copy(src / folder / name, dst / sub / name)
    return dst


def test_nifti_loader_reads_msd_layout_splits_and_caches(tmp_path):
    import nibabel as nib

    from litlab.domains.medical3d.data import NiftiDataModule

    root = hippocampus_cases(tmp_path / "Task04", 6)
    kwargs = {
        "root": str(root),
        "num_classes": 3,
        "patch_size": (32, 48, 32),
        "batch_size": 2,
        "val_fraction": 0.2,
        "test_fraction": 0.2,
        "cache_dir": str(tmp_path / "cache"),
        "split_file": str(tmp_path / "run" / "split.json"),
    }
    dm = NiftiDataModule(**kwargs)
    assert dm.dims == {"in_channels": 1, "num_classes": 3, "patch_size": (32, 48, 32)}
    dm.prepare_data()
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    dm.setup("fit")
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    assert [len(split[k]) for k in ("train", "val", "test")] == [4, 1, 1]
    item = dm.test_set[0]
    source = nib.load(root / "imagesTr" / split["test"][0])
    assert item["image"].shape[1:] == source.shape  # whole volume, as stored
    assert np.allclose(item["affine"].numpy(), source.affine)
    assert abs(float(item["image"].mean())) < 1e-3  # z-scored
    patch = next(iter(dm.train_dataloader()))
    assert patch["image"].shape == (2, 1, 32, 48, 32) and patch["label"].max() > 0

    again = NiftiDataModule(**kwargs)  # same split, volumes from the cache
    again.setup("fit")
    assert torch.equal(again.test_set[0]["image"], item["image"])


def test_nifti_loader_accepts_images_labels_folders_and_rejects_bad_labels(tmp_path):
    from litlab.domains.medical3d.data import NiftiDataModule
    from litlab.errors import UserError

    root = hippocampus_cases(tmp_path / "set", 3, images="images", labels="labels")
    with pytest.raises(UserError, match="num_classes=3"):
        NiftiDataModule(root=str(root), num_classes=2, val_fraction=0.3, test_fraction=0.3).setup(
            "fit"
        )
    with pytest.raises(UserError, match="imagesTr"):
        NiftiDataModule(root=str(tmp_path))


def test_medmnist3d_reads_a_local_npz_through_the_package(tmp_path):
    from litlab.domains.medical3d.data import MedMNIST3DDataModule
    from litlab.errors import UserError

    write_medmnist_npz(tmp_path / "nodulemnist3d.npz")
    dm = MedMNIST3DDataModule(flag="nodulemnist3d", data_dir=str(tmp_path), batch_size=4)
    dm.prepare_data()  # file present: no download attempted (offline-safe)
    dm.setup("fit")
    assert dm.dims == {"in_channels": 1, "num_classes": 2}
    assert [len(s) for s in (dm.train_set, dm.val_set, dm.test_set)] == [12, 4, 6]
    x, y = dm.on_after_batch_transfer(next(iter(dm.test_dataloader())), 0)
    assert (
        x.shape == (4, 1, 28, 28, 28) and x.dtype == torch.float32 and 0 <= x.min() <= x.max() <= 1
    )
    assert y.dtype == torch.long and y.shape == (4,)
    with pytest.raises(UserError, match="nodulemnist3d"):
        MedMNIST3DDataModule(flag="pathmnist", data_dir=str(tmp_path))
    with pytest.raises(UserError, match="not found"):
        MedMNIST3DDataModule(flag="organmnist3d", data_dir=str(tmp_path), download=False).setup(
            "fit"
        )


def _nifti_folder(root: Path, count: int = 4, shape=(10, 12, 8)) -> Path:
    """`count` small image/label pairs in MSD layout (labels 0, 1, 2)."""
    import nibabel as nib

    rng = np.random.default_rng(0)
    for sub in ("imagesTr", "labelsTr"):
        (root / sub).mkdir(parents=True)
    for i in range(count):
        image = rng.normal(size=shape).astype(np.float32)
        label = np.zeros(shape, np.uint8)
        label[2:5, 3:7, 2:4], label[5:8, 3:7, 2:4] = 1, 2
        nib.save(nib.Nifti1Image(image, np.eye(4)), root / "imagesTr" / f"case_{i}.nii.gz")
        nib.save(nib.Nifti1Image(label, np.eye(4)), root / "labelsTr" / f"case_{i}.nii.gz")
    return root


def _relabel(root: Path, values) -> None:
    import nibabel as nib

    path = root / "labelsTr" / "case_2.nii.gz"
    label = np.asarray(nib.load(path).dataobj).astype(np.float32)
    label[0, 0, 0] = values
    nib.save(nib.Nifti1Image(label, np.eye(4)), path)


def _bad_folder(root: Path, case: str) -> str:
    """Four pairs with one fault of `case`; returns the file the refusal must name."""
    import nibabel as nib

    _nifti_folder(root)
    label, image = root / "labelsTr" / "case_2.nii.gz", root / "imagesTr" / "case_2.nii.gz"
    if case == "label of another shape":
        nib.save(nib.Nifti1Image(np.zeros((10, 12, 7), np.uint8), np.eye(4)), label)
    elif case == "label outside the classes":
        _relabel(root, 3)
    elif case == "negative label":
        _relabel(root, -1)
    elif case == "fractional label":
        _relabel(root, 1.5)
    elif case == "truncated image":
        image.write_bytes(image.read_bytes()[:200])
    elif case == "image of nan":
        data = np.full((10, 12, 8), np.nan, np.float32)
        nib.save(nib.Nifti1Image(data, np.eye(4)), image)
    elif case == "image without a label":
        label.unlink()
        return "imagesTr/case_2.nii.gz"
    return "case_2.nii.gz"


BAD_FOLDERS = [
    ("label of another shape", "has shape [10, 12, 7], its image [10, 12, 8]"),
    ("label outside the classes", "holds label 3; labels are whole numbers 0 to 2"),
    ("negative label", "holds label -1;"),
    ("fractional label", "holds label 1.5;"),
    ("truncated image", "cannot read NIfTI"),
    ("image of nan", "holds nan or inf values"),
    ("image without a label", "has no label in labelsTr/"),
]


@pytest.mark.parametrize("case,words", BAD_FOLDERS, ids=[c for c, _ in BAD_FOLDERS])
@pytest.mark.parametrize("module", ["3d", "2d slices"])
def test_a_bad_nifti_folder_is_refused_in_one_line_naming_the_file(tmp_path, case, words, module):
    """Issue 38's bad inputs, each before training: the 3D datamodule and the 2D slices one
    read the same folders through the same checks (`nifti.check_pair`)."""
    from litlab.domains.medical3d.data import NiftiDataModule
    from litlab.domains.segmentation2d.data import Hippocampus2DDataModule
    from litlab.errors import UserError

    name = _bad_folder(tmp_path / "set", case)
    common = {"root": str(tmp_path / "set"), "num_classes": 3, "val_fraction": 0.25}
    with pytest.raises(UserError) as err:
        if module == "3d":
            dm = NiftiDataModule(**common, patch_size=(8, 8, 8), test_fraction=0.25,
                                 cache_dir=str(tmp_path / "cache"))  # fmt: skip
            dm.prepare_data()
        else:
            dm = Hippocampus2DDataModule(**common, image_size=16, test_fraction=0.25)
        dm.setup("fit")
    message = str(err.value)
    assert words in message and name in message and "\n" not in message, message
    assert not list((tmp_path / "cache").glob("*.npz"))  # nothing cached from a bad folder


@pytest.mark.parametrize("experiment", ["unet3d_hippocampus", "unet2d_hippocampus"])
def test_a_recipe_without_its_data_folder_says_where_it_looks_and_how_to_point_there(
    tmp_path, experiment
):
    """The Hippocampus recipes read `${paths.data_dir}/Hippocampus`: without it, the one line
    names that folder and the settings that move it (paths.data_dir, data.root)."""
    from litlab.domains.medical3d import nifti
    from litlab.errors import UserError

    cfg = compose(
        "train", [f"experiment={experiment}", f"paths.data_dir={tmp_path}"], output_dir=tmp_path
    )
    with pytest.raises(UserError) as err:
        nifti.folder_pairs(dict(cfg.data), "data", lambda *args: None)
    message = str(err.value)
    assert message.startswith(f"data.root={tmp_path / 'Hippocampus'} is not a folder (")
    assert "paths.data_dir=FOLDER" in message and "data.root=FOLDER" in message


def test_a_cache_is_never_reused_with_other_settings(tmp_path):
    """Volumes cached for 3 classes are not read unchecked by a run for 2: the key holds the
    classes and the preprocessing, so the labels are read and refused again."""
    from litlab.domains.medical3d.data import NiftiDataModule
    from litlab.errors import UserError

    root = _nifti_folder(tmp_path / "set")
    common = {"root": str(root), "patch_size": (8, 8, 8), "val_fraction": 0.25,
              "test_fraction": 0.25, "cache_dir": str(tmp_path / "cache")}  # fmt: skip
    dm = NiftiDataModule(num_classes=3, **common)
    dm.prepare_data()
    dm.setup("fit")
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    with pytest.raises(UserError, match=r"case_0.nii.gz holds label 2; labels are whole"):
        other = NiftiDataModule(num_classes=2, **common)
        other.prepare_data()
        other.setup("fit")
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1  # the 3-class cache, untouched


def test_hd95_is_monais_distance_and_a_missed_structure_counts_as_the_worst():
    """Volume 0: both structures found, off by 2 and 1 voxels (MONAI's HD95). Volume 1: the
    label holds structure 1 and the prediction misses it (MONAI: nan; here the volume's
    diagonal, so a model that finds nothing cannot score well); structure 2 is absent from
    its label (undefined, left out, not a zero)."""
    from litlab.domains.medical3d.module import HD95

    pred = torch.zeros(2, 36, 50, 35, dtype=torch.long)
    true = pred.clone()
    pred[0, 10:20, 10:30, 10:20], true[0, 11:21, 10:30, 10:22] = 1, 1
    pred[0, 20:25, 20:25, 20:25], true[0, 20:26, 20:25, 20:25] = 2, 2
    true[1, 5:9, 5:9, 5:9] = 1
    diagonal = float(np.linalg.norm([36, 50, 35]))
    values = {}
    for name, index in (("hd95", None), ("hd95_1", 1), ("hd95_2", 2)):
        metric = HD95(3, index)
        metric.update(pred, true)
        values[name] = float(metric.compute())
    assert values["hd95_1"] == pytest.approx((2 + diagonal) / 2)
    assert values["hd95_2"] == pytest.approx(1.0)
    assert values["hd95"] == pytest.approx((1.5 + diagonal) / 2)


def test_hd95_is_logged_on_validation_and_test_but_never_on_training_patches():
    from litlab.domains.medical3d.module import VolumeSegmenter

    assert VolumeSegmenter.monitorable("val/hd95_2") and VolumeSegmenter.monitorable("test/hd95")
    assert not VolumeSegmenter.monitorable("train/hd95")
    assert "train/hd95" not in VolumeSegmenter.monitor_examples()
    module = VolumeSegmenter(torch.nn.Conv3d(1, 3, 1), torch.optim.SGD, 3, (8, 8, 8))
    assert "hd95" in module.val_metrics and "hd95_1" in module.test_metrics
    assert not [name for name in module.train_metrics if "hd95" in name]


@pytest.mark.parametrize("axes", [[0], [1, 2], [0, 1, 2]])
def test_mirroring_flips_each_read_back_before_averaging(axes):
    """A pointwise net sees a mirrored volume as the same volume mirrored: averaging the reads
    flipped back gives the plain read exactly. A read not flipped back would average the
    volume with its mirror image (a different answer for this asymmetric input)."""
    from litlab.domains.medical3d.module import VolumeSegmenter

    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, 3, 1)
    plain = VolumeSegmenter(net, torch.optim.SGD, 3, (8, 8, 8)).eval()
    mirrored = VolumeSegmenter(net, torch.optim.SGD, 3, (8, 8, 8), mirror_axes=axes).eval()
    x = torch.randn(1, 1, 11, 9, 13)
    with torch.no_grad():
        expected = plain.infer(x, mirror=True).softmax(1)
        got = mirrored.infer(x, mirror=True).softmax(1)
        assert torch.equal(mirrored.infer(x), plain.infer(x))  # validation reads once
        unflipped = (expected + expected.flip([a + 2 for a in axes])) / 2
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(unflipped, expected, atol=1e-3)


@pytest.mark.slow  # ~45 s of one worker: make test stays within its 5 minutes
def test_the_hippocampus_recipe_learns_on_four_volumes_and_eval_reproduces_it(cli, tmp_path):
    """experiment=hippocampus as printed, shortened to a few epochs on 4 real volumes (2 train,
    1 val, 1 test): it learns (test Dice above a low bar, where an untrained net scores about
    0.05), reports HD95 per structure on the test volume, mirrors at test time, and eval.py
    gives the same figures from its checkpoint."""
    root = hippocampus_cases(tmp_path / "Hippocampus", 4)
    train = cli(
        "train.py",
        "experiment=hippocampus",
        f"data.root={root}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.samples_per_volume=12",
        "trainer.max_epochs=4",
        timeout=600,
    )
    got = results(train.stdout)[0]
    assert got["test/dice"] > 0.3, train.stdout[-1500:]
    assert {"test/hd95", "test/hd95_1", "test/hd95_2"} <= set(got)
    assert not [k for k in got if k.startswith("train/hd95")]
    run = run_dirs(tmp_path / "logs")[0]
    split = json.loads((run / "data_split.json").read_text())
    assert [len(split[k]) for k in ("train", "val", "test")] == [2, 1, 1]
    ckpt = next((run / "checkpoints").glob("epoch_*.ckpt"))
    again = cli("eval.py", f"ckpt_path={ckpt}", "extras.print_config=false")
    for key in ("test/dice", "test/dice_1", "test/dice_2", "test/hd95"):
        assert results(again.stdout)[0][key] == pytest.approx(got[key], abs=1e-4)


def test_spatial_augmentation_moves_image_and_label_together():
    """data.spatial_augment: rotated and scaled patches keep their labels on the voxels they
    label (the image here is the label map itself, so they must agree after every draw),
    labels stay whole classes (nearest-neighbour), and some draws do turn the patch."""
    from litlab.domains.medical3d.volumes import patch_transform, prepare_for_patches

    label = np.zeros((1, 20, 24, 20), np.uint8)
    label[0, 4:12, 6:18, 5:10], label[0, 12:16, 8:14, 10:16] = 1, 2
    volume = prepare_for_patches({"image": label.astype(np.float32), "label": label}, (20, 24, 20))
    plain, spatial = patch_transform((20, 24, 20), True), patch_transform((20, 24, 20), True, True)
    plain.set_random_state(0)
    spatial.set_random_state(0)
    turned = 0
    for _ in range(40):
        out = spatial(dict(volume))[0]
        image, labels = np.asarray(out["image"])[0], np.asarray(out["label"])[0]
        assert set(np.unique(labels)) <= {0, 1, 2}
        assert np.corrcoef(image.ravel(), labels.ravel())[0, 1] > 0.8
        flips = [
            np.flip(label[0], axes)
            for axes in [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]
        ]
        turned += not any(np.array_equal(labels, f) for f in flips)
    assert 5 <= turned <= 25  # prob 0.3 of 40 draws


def test_mirroring_is_a_setting_of_every_unet3d_run():
    """`model.mirror_axes` as docs/medical3d.md prints it composes with `model=unet3d` alone
    (not only inside experiment=hippocampus), and defaults to reading once."""
    assert list(compose("train", ["model=unet3d"]).model.mirror_axes) == []
    cfg = compose("train", ["model=unet3d", "model.mirror_axes=[0,1,2]"])
    assert list(cfg.model.mirror_axes) == [0, 1, 2]
