"""k-fold cross-validation on every domain (`data.num_folds=K data.fold=i`): the K test folds are
disjoint and cover every item once (never a volume or graph in two folds), the validation set
is carved from the other folds, and fold membership depends on (seed, K, labels) alone, so the
K jobs of a sweep agree. Refusals: test_bad_inputs.py (the CLI) and the datamodules' checks here.
"""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from litlab.errors import UserError


def assert_partition(folds: list[dict], everything: Counter) -> None:
    """`folds[i]` = {split: Counter of item keys}: each fold's train/val/test split all the
    items between them, and the K test folds are disjoint and cover every item once."""
    tests = Counter()
    for fold in folds:
        assert fold["train"] + fold["val"] + fold["test"] == everything
        assert fold["val"] and fold["train"] and fold["test"]
        assert not (set(fold["test"]) & (set(fold["train"]) | set(fold["val"])))
        tests += fold["test"]
    assert tests == everything, "the test folds do not cover every item exactly once"


def _keys(dataset) -> Counter:
    """Items by their bytes (the datasets hold tensors, not indices)."""
    return Counter(x.numpy().tobytes() + bytes([int(y)]) for x, y in dataset)


def test_digits_folds_partition_all_images_and_ignore_other_settings():
    from sklearn.datasets import load_digits

    from litlab.domains.vision.data import DigitsDataModule

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    everything = Counter(
        x.numpy().tobytes() + bytes([int(y)]) for x, y in zip(images, digits.target, strict=True)
    )
    folds = []
    for fold in range(3):
        dm = DigitsDataModule(num_folds=3, fold=fold, seed=7)
        dm.setup()
        folds.append({s: _keys(getattr(dm, f"{s}_set")) for s in ("train", "val", "test")})
        # stratified: every class in every test fold, in proportion
        counts = np.bincount(dm.test_set.labels.numpy(), minlength=10)
        assert counts.min() >= np.bincount(digits.target).min() // 3
    assert_partition(folds, everything)
    # the test fold depends on (seed, K, labels) only: not on val_fraction or test_fraction
    other = DigitsDataModule(num_folds=3, fold=2, seed=7, val_fraction=0.3, test_fraction=0.5)
    other.setup()
    assert _keys(other.test_set) == folds[2]["test"]
    assert len(other.val_set) > len(dm.val_set)


def test_imagefolder_folds_and_refusals(tmp_path):
    from helpers.datafiles import write_images

    from litlab.domains.vision.data import ImageFolderDataModule

    write_images(tmp_path / "flat", [""], classes=("cat", "dog", "fox"), n=6)
    root = tmp_path / "flat"
    folds = []
    for fold in range(3):
        dm = ImageFolderDataModule(root=str(root), image_size=8, num_folds=3, fold=fold)
        dm.setup()
        folds.append(
            {s: Counter(getattr(dm, f"{s}_set").indices) for s in ("train", "val", "test")}
        )
        assert sorted(Counter(dm.train_set.dataset.targets[i] for i in dm.test_set.indices)) == [
            0,
            1,
            2,
        ]
    assert_partition(folds, Counter(range(18)))
    settings = {"root": str(root), "num_folds": 7, "fold": 0}
    with pytest.raises(UserError, match=r"^data.num_folds=7 is too many for .*smallest class 6"):
        ImageFolderDataModule.check_settings(settings, "data")
    (root / "cat" / "5.png").unlink()  # the smallest class is counted from the files
    with pytest.raises(UserError, match=r"smallest class 5\); use 2 to 5$"):
        ImageFolderDataModule.check_settings({**settings, "num_folds": 6}, "data")
    write_images(tmp_path / "split", ["train", "test"], n=2)
    with pytest.raises(UserError, match="fixed train/val/test sub-folders"):
        ImageFolderDataModule.check_settings(
            {"root": str(tmp_path / "split"), "num_folds": 2, "fold": 0}, "data"
        )


def _split_file(dm_class, tmp_path: Path, folds: int, **kwargs) -> list[dict]:
    """The volume names of each fold, as the run dir's data_split.json records them."""
    out = []
    for fold in range(folds):
        path = tmp_path / f"split{fold}.json"
        dm = dm_class(num_folds=folds, fold=fold, split_file=str(path), **kwargs)
        dm.setup()
        split = json.loads(path.read_text())
        out.append({s: Counter(split[s]) for s in ("train", "val", "test")})
    return out


def test_phantom_segmentation_folds_never_share_a_volume(tmp_path):
    from litlab.domains.medical3d.data import PhantomSegmentationDataModule

    kwargs = {"num_volumes": 9, "size": 10, "size_jitter": 1, "patch_size": (8, 8, 8)}
    folds = _split_file(PhantomSegmentationDataModule, tmp_path, 3, **kwargs)
    assert_partition(folds, Counter(f"case_{i:04d}" for i in range(9)))
    with pytest.raises(UserError, match=r"^data.num_folds=10 is too many for the phantoms \(9 "):
        PhantomSegmentationDataModule.check_settings({**kwargs, "num_folds": 10, "fold": 0}, "data")


def _write_nifti(root: Path, structures: list[int]) -> None:
    """Tiny volumes whose dominant structure is the given label (1 or 2)."""
    import nibabel as nib

    for sub in ("imagesTr", "labelsTr"):
        (root / sub).mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, main in enumerate(structures):
        label = np.zeros((8, 8, 8), np.uint8)
        label[1:6, 1:6, 1:6] = main
        label[6, 6, 6] = 3 - main
        image = rng.normal(size=(8, 8, 8)).astype(np.float32)
        nib.save(nib.Nifti1Image(image, np.eye(4)), root / "imagesTr" / f"v{i}.nii.gz")
        nib.save(nib.Nifti1Image(label, np.eye(4)), root / "labelsTr" / f"v{i}.nii.gz")


def test_nifti_folds_are_stratified_by_dominant_structure(tmp_path):
    from litlab import data as F
    from litlab.domains.medical3d.data import NiftiDataModule

    structures = [1, 2] * 4 + [2]  # 4 volumes mostly label 1, 5 mostly label 2
    _write_nifti(tmp_path / "set", structures)
    kwargs = {"root": str(tmp_path / "set"), "num_classes": 3, "patch_size": (8, 8, 8)}
    folds = _split_file(NiftiDataModule, tmp_path, 3, **kwargs)
    assert_partition(folds, Counter(f"v{i}.nii.gz" for i in range(9)))
    for fold in folds:  # each test fold holds both kinds of volume
        assert {structures[int(name[1])] for name in fold["test"]} == {1, 2}
    assert F.dominant_structure(np.zeros((1, 4, 4, 4), np.uint8)) == 0
    with pytest.raises(UserError, match=r"^data.fold=3 is not valid; choose 0 to 2"):
        NiftiDataModule.check_settings({**kwargs, "num_folds": 3, "fold": 3}, "data")
    with pytest.raises(UserError, match=r"\(9 volumes\): each test fold .*; use 2 to 9$"):
        NiftiDataModule.check_settings({**kwargs, "num_folds": 10, "fold": 0}, "data")


def test_phantom_classification_folds_and_labels_known_before_any_volume(tmp_path):
    from litlab.domains.medical3d import volumes as V
    from litlab.domains.medical3d.data import PhantomClassificationDataModule

    # the labels checked before any work are those of the generated volumes
    for i in range(20):
        assert V.phantom_has_nodule(3, i, 0.5) == V.phantom(3, i, (12, 12, 12), 0.5)[2]
    kwargs = {"num_volumes": 20, "size": 12, "size_jitter": 0, "seed": 3}
    labels = PhantomClassificationDataModule.fold_labels(kwargs)
    folds = []
    for fold in range(2):
        dm = PhantomClassificationDataModule(num_folds=2, fold=fold, **kwargs)
        dm.setup()
        folds.append({s: _keys(getattr(dm, f"{s}_set")) for s in ("train", "val", "test")})
    everything = folds[0]["train"] + folds[0]["val"] + folds[0]["test"]
    assert len(everything) == 20 and sorted(k[-1] for k in everything.elements()) == sorted(labels)
    assert_partition(folds, everything)
    smallest = min(Counter(labels).values())
    with pytest.raises(UserError, match=rf"smallest class {smallest}\); use 2 to {smallest}$"):
        PhantomClassificationDataModule.check_settings(
            {**kwargs, "num_folds": smallest + 1, "fold": 0}, "data"
        )


def test_medmnist3d_folds_pool_the_official_splits(tmp_path):
    pytest.importorskip("medmnist")
    from helpers.datafiles import write_medmnist_npz

    from litlab.domains.medical3d.data import MedMNIST3DDataModule

    write_medmnist_npz(tmp_path / "nodulemnist3d.npz")
    folds = []
    for fold in range(2):
        dm = MedMNIST3DDataModule(data_dir=str(tmp_path), num_folds=2, fold=fold)
        dm.setup()
        folds.append({s: _keys(getattr(dm, f"{s}_set")) for s in ("train", "val", "test")})
    assert sum(folds[0][s].total() for s in folds[0]) == 22  # 12 + 4 + 6, pooled
    assert_partition(folds, folds[0]["train"] + folds[0]["val"] + folds[0]["test"])
    with pytest.raises(UserError, match=r"^data.num_folds=20 is too many for .*22 volumes"):
        MedMNIST3DDataModule.check_settings(
            {"flag": "nodulemnist3d", "size": 28, "data_dir": str(tmp_path), "num_folds": 20},
            "data",
        )


def test_tu_fold_count_is_refused_from_the_raw_labels_before_reading_graphs(shared_data):
    from litlab.domains.graph.data import TUDataModule

    data = shared_data("TUDataset/MUTAG").parents[1]
    settings = {"name": "MUTAG", "data_dir": str(data), "fold": 0, "num_folds": 64}
    with pytest.raises(UserError, match=r"^data.num_folds=64 is too many for MUTAG \(188 graphs"):
        TUDataModule.check_settings(settings, "data")
    TUDataModule.check_settings({**settings, "num_folds": 63}, "data")
    assert not (data / "cache").exists(), "graphs were read"  # PyG's processed files: none


@pytest.mark.parametrize("name", ["SBMDataModule", "PlanetoidDataModule", "KarateDataModule"])
def test_node_datasets_keep_their_fixed_split(name):
    from litlab.domains.graph import data as graph

    cls = getattr(graph, name)
    settings = {"name": "Cora", "num_folds": 5, "fold": 0}
    with pytest.raises(UserError, match=rf"^data.num_folds=5: {name} keeps the benchmark's fixed"):
        cls.check_settings(settings, "data")
    cls.check_settings({**settings, "num_folds": None}, "data")


def test_fold_without_num_folds_is_a_mistake():
    from litlab import data as F

    F.check_fold({"num_folds": None, "fold": 0}, "data")
    with pytest.raises(UserError, match=r"^data.fold=2 needs k-fold .*data.num_folds=5"):
        F.check_fold({"num_folds": None, "fold": 2}, "data")


@pytest.mark.slow
def test_a_two_fold_digits_sweep_of_two_configurations_is_compared_fold_by_fold(tmp_path, capfd):
    """`-m data.num_folds=2 'data.fold=range(2)' model.net.dropout=0.3,0.1`: four jobs, two
    groups (one per dropout) that ran the same folds, so they are compared by the paired t on
    the two folds; every interval of an accuracy lies in [0, 1] and of a loss >= 0. The sweep
    runs in the worker (its real `cli.run`): the summary's arithmetic is checked, not a process."""
    import csv
    import json

    from helpers.runs import command_in_process
    from scipy import stats

    tiny = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]
    grid = ["data.num_folds=2", "data.fold=range(2)", "model.net.dropout=0.3,0.1"]
    overrides = ["hydra.mode=MULTIRUN", *grid, *tiny]
    code, _, err = command_in_process("train.py", overrides, tmp_path / "logs", capfd)
    assert code == 0, err[-3000:]
    [sweep] = list((tmp_path / "logs" / "train" / "multiruns").glob("*"))
    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["data.fold"], r["model.net.dropout"], r["status"]) for r in rows] == [
        (fold, dropout, "completed") for fold in ("0", "1") for dropout in ("0.3", "0.1")
    ]
    summary = json.loads((sweep / "summary_stats.json").read_text())
    groups = {r["group"] for r in summary["groups"]}
    assert groups == {"model.net.dropout=0.3", "model.net.dropout=0.1"}  # no "all jobs"
    for r in summary["groups"]:
        assert [x["replica"] for x in r["replicas"]] == ["data.fold=0", "data.fold=1"]
        low, high = (0, 1) if r["metric"].endswith(("acc", "f1")) else (0, None)
        assert r["ci95_low"] >= low and (high is None or r["ci95_high"] <= high)
    [c] = [c for c in summary["comparisons"] if c["metric"] == "test/acc"]
    assert (c["test"], c["n_pairs"], c["note"]) == ("paired t", 2, "")
    folds = {  # test/acc by group, fold 0 then fold 1
        group: [float(r["test/acc"]) for r in rows if group.endswith(f"={r['model.net.dropout']}")]
        for group in (c["group"], c["best_group"])
    }
    differences = [a - b for a, b in zip(folds[c["group"]], folds[c["best_group"]])]
    assert c["diff"] == pytest.approx(sum(differences) / 2)
    if differences[0] != differences[1]:  # else no p-value (an exact difference)
        assert c["p"] == pytest.approx(stats.ttest_rel(*folds.values()).pvalue)
    best_jobs = {int(r["job"]) for r in rows if r["best"] == "*"}
    assert len(best_jobs) == 2  # the best group's two folds

    # the folds of one configuration alone (the README's `-m data.num_folds=5 data.fold=...`)
    # are one group: mean ± std of test/acc over the folds
    from litlab.sweeps.summary import load_records, write_summary

    one = [r for r in load_records(sweep) if "model.net.dropout=0.3" in r["overrides"]]
    alone = tmp_path / "one-configuration"
    alone.mkdir()
    write_summary(alone, one, plot=False)
    acc = [
        r for r in csv.DictReader((alone / "summary_stats.csv").open()) if r["metric"] == "test/acc"
    ]
    assert [(r["group"], r["n"]) for r in acc] == [("all jobs", "2")]
    values = folds["model.net.dropout=0.3"]
    assert float(acc[0]["mean"]) == pytest.approx(sum(values) / 2)
    assert float(acc[0]["std"]) == pytest.approx(abs(values[0] - values[1]) / 2**0.5)


def test_fold_jobs_are_replicas_and_num_folds_is_not():
    """The sweep summary groups `data.fold=i` jobs as replicas (configs/hydra/default.yaml's
    replica_keys), while `data.num_folds` stays a setting: one group per model here."""
    from litlab.sweeps.summary import replica_groups

    records = [
        {
            "status": "completed",
            "overrides": [f"model={model}", "data.num_folds=3", f"data.fold={fold}"],
            "metrics": {"test/acc": acc},
        }
        for model, accs in (("cnn", [0.9, 0.8, 1.0]), ("resnet18", [0.5, 0.6, 0.7]))
        for fold, acc in enumerate(accs)
    ]
    groups = {
        name: (len(jobs), round(sum(j["metrics"]["test/acc"] for j in jobs) / len(jobs), 6))
        for name, jobs in replica_groups(records, ["seed", "fold"]).items()
    }
    assert groups == {"model=cnn": (3, 0.9), "model=resnet18": (3, 0.6)}


def test_mnist_folds_are_checked_from_the_label_files_on_disk(tmp_path):
    """MNIST's smallest class is read from its small label file before any image is read;
    with no files yet (a download to come) the check waits for setup."""
    from helpers.datafiles import write_idx

    from litlab.domains.vision.downloads import MNISTDataModule

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    settings = {"data_dir": str(tmp_path), "num_folds": 7, "fold": 0}
    MNISTDataModule.check_settings(settings, "data")  # nothing on disk yet
    write_idx(raw / "t10k-labels-idx1-ubyte.gz", np.repeat(np.arange(10, dtype=np.uint8), 6))
    with pytest.raises(UserError, match=r"^data.num_folds=7 is too many for MNIST \(60 images"):
        MNISTDataModule.check_settings(settings, "data")
    MNISTDataModule.check_settings({**settings, "num_folds": 6}, "data")
