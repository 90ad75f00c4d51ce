"""Every prediction traced to its source, every run's split written: predictions.csv names each
row by what it was predicted on (a CSV row or id, an image file, a volume and slice, a node or
graph index, a dataset index) and data_split.json lists each split's items by the same names.
A row's source leads back to the item it was computed on: the label read from the source
independently equals the row's target."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers.masks import mask_folder, nifti_folder
from PIL import Image

from litlab.errors import UserError


def _targets(dm, split: str = "test") -> list:
    """The labels of `split` in the order eval.py predicts them (its predict loader)."""
    dm.predict_split = split
    out = []
    for batch in dm.predict_dataloader():
        y = batch.y if hasattr(batch, "y") else batch[1]
        out += np.asarray(y).reshape(-1).tolist()
    return out


def _partition(dm, count: int) -> None:
    """The split file's lists cover every item once (val and test disjoint)."""
    s = dm.split_sources
    assert sorted(map(str, s["train"] + s["val"] + s["test"])) == sorted(
        map(str, set(s["train"]) | set(s["val"]) | set(s["test"]))
    )
    assert len(s["train"]) + len(s["val"]) + len(s["test"]) == count


@pytest.mark.xdist_group("digits_run")
def test_the_digits_run_names_its_split_and_every_prediction(digits_run):
    """train.py wrote data_split.json; eval.py's rows carry `sample`, the digit's index in
    scikit-learn's load_digits(), in the order of the split file's test list."""
    from sklearn.datasets import load_digits

    split = json.loads((digits_run.run / "data_split.json").read_text())
    everything = split["train"] + split["val"] + split["test"]
    assert sorted(everything) == list(range(1797))
    rows = pd.read_csv(digits_run.eval / "predictions.csv")
    assert list(rows.columns[:3]) == ["index", "sample", "target"]
    assert rows["sample"].tolist() == split["test"]
    assert (rows["target"] == load_digits().target[rows["sample"]]).all()


def test_a_table_names_rows_by_number_or_by_its_id_column(tmp_path):
    from litlab.domains.table.data import TableDataModule

    dm = TableDataModule(seed=3)
    dm.setup()
    _partition(dm, 442)
    from sklearn.datasets import load_diabetes

    rows = dm.sources("test")["row"]
    assert np.allclose(_targets(dm), load_diabetes().target[rows])  # row 0: the first row
    path = tmp_path / "t.csv"
    lines = [f"{i % 7},p{i:03d},{i},{3 * i + 1}" for i in range(40)]
    path.write_text("a,pid,b,y\n" + "\n".join(lines) + "\n")
    dm = TableDataModule(path=str(path), id_column="pid", seed=3)
    dm.setup()
    assert dm.feature_names == ["a", "b"] and dm.x.shape == (40, 2)  # the id is no feature
    ids = dm.sources("test")["pid"]
    assert _targets(dm) == [3 * int(i[1:]) + 1 for i in ids]
    _partition(dm, 40)


ID_REFUSALS = {
    "nope": "data.id_column=nope is not a column of {path}; valid: a column of its header row "
    "other than the target's (the last): a, pid, b",
    "y": "data.id_column=y is not a column of {path}; valid: a column of its header row other "
    "than the target's (the last): a, pid, b",
    "a": "data.id_column=a: the id '0' names rows 0 and 7 of {path}; valid: a column that names "
    "each row once",
}


@pytest.mark.parametrize("id_column", list(ID_REFUSALS))
def test_a_bad_id_column_is_one_line(id_column, tmp_path):
    from litlab.domains.table.data import TableDataModule

    path = tmp_path / "t.csv"
    path.write_text("a,pid,b,y\n" + "".join(f"{i % 7},p{i},{i},{i}\n" for i in range(20)))
    with pytest.raises(UserError) as err:
        TableDataModule.check_settings({"path": str(path), "id_column": id_column}, "data")
    assert str(err.value) == ID_REFUSALS[id_column].format(path=path)
    with pytest.raises(UserError, match=r"^data.id_column=pid needs a table \(data.path="):
        TableDataModule.check_settings({"path": None, "id_column": "pid"}, "data")


def test_image_folders_name_rows_by_file(tmp_path):
    from helpers.datafiles import write_images

    from litlab.domains.vision.data import ImageFolderDataModule

    write_images(tmp_path / "imgs", [""], n=6)
    dm = ImageFolderDataModule(root=str(tmp_path / "imgs"), image_size=8, seed=1)
    dm.setup()
    _partition(dm, 18)
    files = dm.sources("test")["image"]
    assert _targets(dm) == [dm.classes.index(f.split("/")[0]) for f in files]


@pytest.mark.parametrize("files", [("t10k",), ("train", "t10k")])
def test_mnist_names_rows_by_their_place_in_its_files(files, tmp_path):
    """`test/<i>`: image i of t10k (also when only t10k is there and is split three ways)."""
    from helpers.datafiles import write_idx

    from litlab.domains.vision.downloads import MNISTDataModule

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    labels = {}
    for i, name in enumerate(files):
        labels[name] = np.random.default_rng(i).permutation(np.repeat(np.arange(10), 8))
        write_idx(raw / f"{name}-labels-idx1-ubyte.gz", labels[name])
        write_idx(raw / f"{name}-images-idx3-ubyte.gz", np.zeros((80, 4, 4)))
    dm = MNISTDataModule(data_dir=str(tmp_path), download=False, val_fraction=0.25)
    dm.setup()
    _partition(dm, 80 * len(files))
    read = {"train": labels.get("train"), "test": labels["t10k"]}

    def label(sample: str) -> int:
        split, i = sample.split("/")
        return int(read[split][int(i)])

    for split in ("val", "test"):
        assert _targets(dm, split) == [label(s) for s in dm.sources(split)["sample"]]


def test_nodes_and_phantom_volumes_name_rows_by_index(tmp_path):
    from litlab.domains.graph.data import SBMDataModule
    from litlab.domains.medical3d import volumes as V
    from litlab.domains.medical3d.data import PhantomClassificationDataModule

    graph = SBMDataModule(nodes_per_class=30, num_val=20, num_test=40, train_per_class=5)
    nodes = graph.sources("test")["node"]
    assert (
        len(nodes) == 40
        and graph.data.y[nodes].tolist() == graph.data.y[graph.data.test_mask].tolist()
    )
    dm = PhantomClassificationDataModule(num_volumes=12, size=12, size_jitter=0, seed=5)
    dm.setup()
    _partition(dm, 12)
    cases = dm.sources("test")["case"]
    truth = [V.phantom_has_nodule(5, int(c.removeprefix("case_")), 0.5) for c in cases]
    assert _targets(dm) == truth


def test_graphs_name_rows_by_their_index_in_the_dataset(shared_data):
    from litlab.domains.graph.data import TUDataModule

    root = shared_data("TUDataset/MUTAG").parents[1]
    dm = TUDataModule(name="MUTAG", data_dir=str(root), fold=2)
    dm.setup()
    _partition(dm, 188)
    graphs = dm.sources("test")["graph"]
    assert _targets(dm) == [int(dm.dataset[g].y) for g in graphs]


def _segmenter(num_classes: int = 3):
    from functools import partial

    import torch

    from litlab.domains.segmentation2d.module import ImageSegmenter
    from litlab.domains.segmentation2d.nets import unet2d

    torch.manual_seed(0)
    net = unet2d(1, num_classes, channels=[4, 8], strides=[2], num_res_units=0)
    return ImageSegmenter(net, partial(torch.optim.SGD, lr=0.1), num_classes=num_classes)


def _predict(dm, out):
    """eval.py's predict and write, on an untrained 2D U-Net, into `out`."""
    import lightning as L

    from litlab.runs.summary import write_csv

    model = _segmenter(dm.num_classes)
    model.output_dir = out
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    batches = trainer.predict(model, datamodule=dm)
    write_csv(batches, out / "predictions.csv", dm.sources(dm.predict_split))
    return pd.read_csv(out / "predictions.csv")


def test_2d_eval_writes_each_slices_mask_named_by_its_volume(tmp_path):
    """NIfTI slices: a row per slice (volume, slice, its mask file), the item's Dice on each;
    masks/<volume>_slice<k>.png at the slice's own size (the padding cropped off)."""
    from litlab.domains.segmentation2d.data import Hippocampus2DDataModule

    root = nifti_folder(tmp_path / "nifti")
    dm = Hippocampus2DDataModule(root=str(root), image_size=16, seed=0)
    dm.setup()
    rows = _predict(dm, tmp_path)
    slices = {n: 3 + int(n[1]) % 2 for n in dm.split_sources["test"]}
    assert list(rows.columns[:4]) == ["index", "volume", "slice", "mask"]
    assert rows["volume"].tolist() == [n for n in slices for _ in range(slices[n])]
    assert rows["slice"].tolist() == [k for n in slices for k in range(slices[n])]
    assert rows.groupby("volume")["item_dice"].nunique().eq(1).all()
    for _, row in rows.iterrows():
        assert (
            row["mask"] == f"masks/{row['volume'].removesuffix('.nii.gz')}_slice{row['slice']}.png"
        )
        mask = np.asarray(Image.open(tmp_path / row["mask"]))
        assert mask.shape == (12, 10) and mask.max() < 3
    assert len(list((tmp_path / "masks").iterdir())) == len(rows)


def test_2d_eval_writes_each_images_mask_named_by_the_image(tmp_path):
    """A mask folder: a row per image, masks/<image stem>.png equal to the predicted pixels."""
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    dm = MaskFolderDataModule(str(mask_folder(tmp_path / "m", count=12)), image_size=32)
    dm.setup()
    rows = _predict(dm, tmp_path)
    assert rows["image"].tolist() == dm.split_sources["test"]
    for _, row in rows.iterrows():
        mask = np.asarray(Image.open(tmp_path / "masks" / row["image"]))
        assert row["mask"] == f"masks/{row['image']}" and mask.shape == (32, 32)
        assert [(mask == k).sum() for k in (1, 2)] == [row["pixels_1"], row["pixels_2"]]
    assert (rows["item_dice"].fillna(-1) == rows["dice"].fillna(-1)).all()  # an item, a row
