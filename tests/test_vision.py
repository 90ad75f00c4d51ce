"""Vision domain: every datamodule runs, the default recipe learns, eval reproduces it."""

import json
import traceback

import numpy as np
import pytest
import torch
from helpers.datafiles import write_idx, write_images

from litlab.config.compose import compose

FAST = ["trainer.fast_dev_run=true", "data.num_workers=0", "logger=csv"]


def test_corrupt_idx_file_is_a_user_error(tmp_path):
    """A corrupt download is bad input: a UserError naming the file and the fix (which the entry
    point prints as one line, exit 2: tests/test_bad_inputs.py), not a gzip traceback."""
    from litlab.domains.vision.downloads import MNISTDataModule
    from litlab.errors import UserError

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (raw / name).write_bytes(b"not a gzip file")
    with pytest.raises(UserError, match="^cannot read .*t10k-"):
        MNISTDataModule(data_dir=str(tmp_path), download=False).setup()


def write_fashion_mnist(data_dir) -> None:
    raw = data_dir / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 300), ("t10k", 100)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 255, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)


# README commands run with `debug=fdr` (one batch of train, val and test, no checkpoints), in
# this process: (overrides, net class, dims, (train, val, test) sizes)
VISION_RUNS = {
    "mnist": (
        ["data=mnist", "data.data_dir=@shared/MNIST", "data.download=false"],
        "SmallCNN",
        {"in_channels": 1, "num_classes": 10, "image_size": 28},
        10000,
    ),
    "fashion_mnist": (
        ["data=fashion_mnist", "data.data_dir=@tmp", "data.download=false"],
        "SmallCNN",
        {"in_channels": 1, "num_classes": 10, "image_size": 28},
        400,
    ),
    "imagefolder-resnet18": (
        ["data=imagefolder", "data.root=@tmp/flat", "data.image_size=16", "model=resnet18"],
        "ResNet",
        {"in_channels": 3, "num_classes": 3, "image_size": 16},
        24,
    ),
    "imagefolder-splits": (
        ["data=imagefolder", "data.root=@tmp/splits", "data.image_size=16"],
        "SmallCNN",
        {"in_channels": 3, "num_classes": 3, "image_size": 16},
        72,
    ),
    "digits_resnet18": (
        ["experiment=digits_resnet18"],
        "ResNet",
        {"in_channels": 1, "num_classes": 10, "image_size": 8},
        1797,
    ),
}


@pytest.mark.parametrize("num_workers", [pytest.param(0, marks=pytest.mark.slow), 2])
def test_an_image_gone_mid_run_is_one_line_with_loader_workers_too(tmp_path, num_workers):
    """An image deleted after the folder was checked: the loader's error is the one line that
    names the file, also from a DataLoader worker (torch rebuilds it there from a message of
    the worker's whole traceback); the type is kept (its exit code), and other UserError kinds
    come back as their own line too."""
    from torch.utils.data import DataLoader

    from litlab.domains.vision.data import ImageFolderDataModule
    from litlab.errors import DiskFull, UserError

    write_images(tmp_path / "flat", [""])
    dm = ImageFolderDataModule(
        root=str(tmp_path / "flat"), image_size=16, batch_size=4, num_workers=num_workers
    )
    dm.setup()
    gone = tmp_path / "flat" / "cat" / "0.png"
    gone.unlink()
    with pytest.raises(UserError) as err:
        for _ in dm.loader(torch.utils.data.Subset(dm.train_set.dataset, range(24)), False):
            pass
    assert str(err.value).startswith(f"cannot read image {gone}: ")
    assert str(err.value).endswith("; fix or remove the file") and "\n" not in str(err.value)
    # each error's traceback holds its loader's iterator in a reference cycle (frames that hold
    # the exception): let go of them here, so their workers end now, not at a later check's
    # garbage collection, which waited 5 s a worker (torch's join timeout)
    traceback.clear_frames(err.tb)

    class Full(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise DiskFull("the disk is full writing /x: free space")

    batches = iter(DataLoader(Full(), num_workers=num_workers))
    with pytest.raises(DiskFull, match="^the disk is full writing /x: free space$") as raised:
        next(batches)
    traceback.clear_frames(raised.tb)
    del batches


@pytest.mark.parametrize(
    "name",  # MNIST's run (21 s) is the slow stage's: the other sets cover the same code in make test
    [pytest.param(n, marks=pytest.mark.slow) if n == "mnist" else n for n in VISION_RUNS],
)
def test_every_vision_datamodule_runs(name, tmp_path, shared_data, monkeypatch):
    """`python src/train.py data=... [model=...] debug=fdr`, in process: the data reaches the
    net with the datamodule's shape and classes, every image lands in a split, one batch of
    each stage gives metrics, and fast_dev_run writes no best checkpoint."""
    from litlab.config import build
    from litlab.recipes import train_and_test

    overrides, net_class, dims, total = VISION_RUNS[name]
    if name == "mnist":  # the shared copy holds only the 10k test split: it is split in three
        mnist = str(shared_data("MNIST"))
        overrides = [o.replace("@shared/MNIST", mnist) for o in overrides]
    write_fashion_mnist(tmp_path)
    write_images(tmp_path / "flat", [""])
    write_images(tmp_path / "splits", ["train", "val"])
    built = {}
    real_datamodule, real_model = build.datamodule, build.model
    monkeypatch.setattr(
        build, "datamodule", lambda cfg: built.setdefault("dm", real_datamodule(cfg))
    )
    monkeypatch.setattr(
        build, "model", lambda cfg, dm: built.setdefault("model", real_model(cfg, dm))
    )
    cfg = compose(
        "train",
        [
            *[o.replace("@tmp", str(tmp_path)) for o in overrides],
            "debug=fdr",
            "data.num_workers=0",
            "logger=csv",
            "extras.print_config=false",
            "callbacks.rich_progress_bar=null",
        ],
        output_dir=tmp_path / "run",
    )
    metrics = train_and_test(cfg).metrics
    dm, model = built["dm"], built["model"]
    assert type(model.net).__name__ == net_class and dm.dims == dims
    sizes = [len(dm.train_set), len(dm.val_set), len(dm.test_set)]
    assert sum(sizes) == total and min(sizes) > 0, sizes
    for split in ("train", "val", "test"):
        assert 0 <= metrics[f"{split}/acc"] <= 1 and metrics[f"{split}/loss"] > 0, metrics
    assert not list((tmp_path / "run").glob("checkpoints/epoch_*.ckpt"))  # no best checkpoint
    if name == "fashion_mnist":  # the official split is kept: train/val from the 300, test = 100
        assert sizes[2] == 100 and [int(dm.test_set[i][1]) for i in range(12)] == [
            i % 10 for i in range(12)
        ]
    if name.startswith("imagefolder"):
        assert dm.classes == ["cat", "dog", "fox"]
    if name == "imagefolder-splits":  # train/ and val/ used as they are; no test/: val tests
        assert sizes[:2] == [24, 24] and dm.test_set is dm.val_set


@pytest.mark.xdist_group("digits_run")  # with the other users of the shared run
def test_default_recipe_learns_and_eval_reproduces_it(digits_run):
    """A short digits run (`train.py trainer.max_epochs=12 data.num_workers=0`) reaches >= 97%
    test accuracy; its checkpoint loads with weights_only=True; eval.py reproduces the test
    metric and writes predictions."""
    run = digits_run.run
    test_acc = json.loads((run / "metrics.json").read_text())["test/acc"]  # what it printed
    assert test_acc >= 0.97, test_acc
    ckpt = torch.load(digits_run.best, map_location="cpu", weights_only=True)
    assert {"state_dict", "litlab_config"} <= set(ckpt)
    assert (run / ".hydra" / "config.yaml").is_file() and (run / "csv" / "metrics.csv").is_file()

    metrics = json.loads((digits_run.eval / "metrics.json").read_text())
    assert metrics["test/acc"] == pytest.approx(test_acc, abs=1e-4)
    import pandas as pd

    preds = pd.read_csv(digits_run.eval / "predictions.csv")
    assert len(preds) == 360 and (preds.target == preds.pred).mean() == pytest.approx(
        test_acc, abs=1e-4
    )


def test_same_seed_gives_bit_identical_weights(tmp_path):
    """Two CPU runs with one seed end with exactly the same weights (and another seed not)."""
    from litlab.config.compose import compose
    from litlab.recipes import train_and_test

    def final_weights(seed: int, name: str):
        cfg = compose(
            "train",
            [
                f"seed={seed}",
                "trainer.max_epochs=2",
                "test=false",
                "trainer.limit_train_batches=8",
                "trainer.log_every_n_steps=4",
                "extras.print_config=false",
                "callbacks.rich_progress_bar=null",
            ],
            output_dir=tmp_path / name,
        )
        train_and_test(cfg)
        last = torch.load(tmp_path / name / "checkpoints" / "last.ckpt", weights_only=True)
        return last["state_dict"]

    a, b, c = final_weights(1, "a"), final_weights(1, "b"), final_weights(2, "c")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize("queue_numel", [1 << 16, 100])
def test_queued_metrics_equal_metrics_over_all_samples(queue_numel):
    """log_step only queues predictions: the epoch's metrics must still be those of every
    sample, whether the queue is flushed once (epoch end) or many times (a small limit)."""
    from functools import partial

    from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score

    from litlab.domains.vision.module import ImageClassifier

    model = ImageClassifier(torch.nn.Linear(4, 3), partial(torch.optim.SGD, lr=0.1), num_classes=3)
    model.QUEUE_NUMEL = queue_numel
    gen = torch.Generator().manual_seed(0)
    preds, target, losses = [], [], []
    for size in (64, 64, 17):  # a short last batch: the loss mean is weighted by batch size
        p = torch.randint(0, 3, (size,), generator=gen)
        t = torch.randint(0, 3, (size,), generator=gen)
        loss = torch.rand((), generator=gen)
        model.log_step("train", loss, p, t, size)
        preds.append(p), target.append(t), losses.append(loss * size)
    model.update_metrics("train")
    got = model.metrics("train").compute()
    preds, target = torch.cat(preds), torch.cat(target)
    assert got["train/acc"] == multiclass_accuracy(preds, target, 3, average="micro")
    assert got["train/f1"] == multiclass_f1_score(preds, target, 3, average="macro")
    assert torch.isclose(model.train_loss.compute(), torch.stack(losses).sum() / len(preds))
