"""Vision domain: every datamodule runs, the default recipe learns, eval reproduces it."""
import gzip
import json

import numpy as np
import pytest
import torch
from conftest import results, run_dirs

FAST = ["trainer.fast_dev_run=true", "data.num_workers=0", "logger=csv"]


def write_idx(path, array: np.ndarray) -> None:
    """An MNIST-format idx file (gzip), as the original distribution files are."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_mnist_from_local_test_split(cli, shared_data):
    """The shared copy has only the 10k test split: it is split into train/val/test."""
    root = shared_data("MNIST")
    proc = cli("train.py", "data=mnist", f"data.data_dir={root}", "data.download=false", *FAST)
    assert "splitting its 10000 images" in proc.stdout + proc.stderr


def test_fashion_mnist_reads_idx_files(tmp_path, cli):
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 300), ("t10k", 100)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 255, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    cli("train.py", "data=fashion_mnist", f"data.data_dir={tmp_path / 'data'}",
        "data.download=false", *FAST)
    from litlab.data.vision_downloads import FashionMNISTDataModule

    dm = FashionMNISTDataModule(data_dir=str(tmp_path / "data"), download=False)
    dm.setup()  # the official split is kept: train/val from the 300, test = the 100
    assert len(dm.train_set) + len(dm.val_set) == 300 and len(dm.test_set) == 100
    assert [int(dm.test_set[i][1]) for i in range(12)] == [i % 10 for i in range(12)]


def test_corrupt_idx_file_is_a_user_error(tmp_path):
    """A corrupt download is bad input: a UserError naming the file and the fix (which the entry
    point prints as one line, exit 2: tests/test_bad_inputs.py), not a gzip traceback."""
    from litlab.data.vision_downloads import MNISTDataModule
    from litlab.errors import UserError

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (raw / name).write_bytes(b"not a gzip file")
    with pytest.raises(UserError, match="^cannot read .*t10k-"):
        MNISTDataModule(data_dir=str(tmp_path), download=False).setup()


def test_imagefolder_from_written_images(tmp_path, cli):
    """Both layouts (class folders; train/ and val/ of class folders) in one multirun: one
    interpreter start for the two fast_dev_runs."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for layout, splits in (("flat", [""]), ("splits", ["train", "val"])):
        for split in splits:
            for cls in ("cat", "dog", "fox"):
                folder = tmp_path / layout / split / cls
                folder.mkdir(parents=True)
                for i in range(8):
                    image = rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)
                    Image.fromarray(image).save(folder / f"{i}.png")
    cli("train.py", "hydra.mode=MULTIRUN", "data=imagefolder", "data.image_size=16",
        f"data.root={tmp_path / 'flat'},{tmp_path / 'splits'}", "model=resnet18", *FAST)
    from litlab.data.vision import ImageFolderDataModule

    flat = ImageFolderDataModule(root=str(tmp_path / "flat"), image_size=16)
    flat.setup()  # one folder: split by seed, stratified
    assert flat.classes == ["cat", "dog", "fox"]
    assert len(flat.train_set) + len(flat.val_set) + len(flat.test_set) == 24
    splits = ImageFolderDataModule(root=str(tmp_path / "splits"), image_size=16)
    splits.setup()  # train/ and val/ used as they are
    assert len(splits.train_set) == 24 and len(splits.val_set) == 24


def test_default_recipe_learns_and_eval_reproduces_it(tmp_path, cli):
    """A short digits run reaches >= 97% test accuracy; its checkpoint loads with
    weights_only=True; eval.py reproduces the test metric and writes predictions."""
    proc = cli("train.py", "trainer.max_epochs=12", "data.num_workers=0")
    test_acc = results(proc.stdout)[0]["test/acc"]
    assert test_acc >= 0.97, proc.stdout[-2000:]
    run = run_dirs(tmp_path / "logs")[-1]
    best = next(p for p in (run / "checkpoints").glob("epoch_*.ckpt"))
    ckpt = torch.load(best, map_location="cpu", weights_only=True)
    assert {"state_dict", "litlab_config"} <= set(ckpt)
    assert (run / ".hydra" / "config.yaml").is_file() and (run / "csv" / "metrics.csv").is_file()

    cli("eval.py", f"ckpt_path={best}")
    out = run_dirs(tmp_path / "logs", "eval")[-1]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test/acc"] == pytest.approx(test_acc, abs=1e-4)
    import pandas as pd

    preds = pd.read_csv(out / "predictions.csv")
    assert len(preds) == 360 and (preds.target == preds.pred).mean() == pytest.approx(test_acc, abs=1e-4)


def test_same_seed_gives_bit_identical_weights(tmp_path):
    """Two CPU runs with one seed end with exactly the same weights (and another seed not)."""
    from conftest import compose

    from litlab.recipes.train import train

    def final_weights(seed: int, name: str):
        cfg = compose("train", [f"seed={seed}", "trainer.max_epochs=2", "test=false",
                                "trainer.limit_train_batches=8", "trainer.log_every_n_steps=4",
                                "extras.print_config=false", "callbacks.rich_progress_bar=null"],
                      output_dir=tmp_path / name)
        train(cfg)
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

    from litlab.models.vision import ImageClassifier

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
