"""The 2D segmentation kind (`model=unet2d data=hippocampus2d`, a user's `data=masks`):
mask folders refused in one line naming the first bad file, per-item Dice, the service's
padding rule, the output family. Train, eval, export, serve, quantize end to end on a mask
folder: the slow test below; on Hippocampus: the matrix row."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers.masks import mask_folder
from helpers.runs import ROOT
from PIL import Image

from litlab.errors import UserError


def _refusal(root, **settings) -> str:
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    with pytest.raises(UserError) as err:
        MaskFolderDataModule.check_settings({"root": str(root), **settings}, "data")
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_mask_folder_that_does_not_match_its_images_is_named(tmp_path):
    root = mask_folder(tmp_path / "m", count=4)
    (root / "masks" / "001.png").unlink()
    assert _refusal(root).endswith(f"001.png has no mask: expected {root}/masks/001.png")
    Image.fromarray(np.zeros((32, 30), np.uint8)).save(root / "masks" / "001.png")
    assert "001.png has shape [32, 30], its image [32, 32]" in _refusal(root)
    Image.fromarray(np.full((32, 32), 3, np.uint8)).save(root / "masks" / "001.png")
    assert "001.png holds label 3; labels are whole numbers 0 to 2" in _refusal(root, num_classes=3)
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(root / "masks" / "001.png")
    assert "one channel" in _refusal(root)
    Image.fromarray(np.zeros((32, 32), np.uint8)).save(root / "masks" / "001.png")
    assert "larger than data.image_size=16; set data.image_size=32" in _refusal(root, image_size=16)
    (root / "masks" / "002.png").write_text("not a png")
    assert "002.png is not a readable image (UnidentifiedImageError)" in _refusal(root)
    assert "needs images/ and masks/" in _refusal(tmp_path)


def test_items_are_split_whole_and_evaluated_one_per_batch(tmp_path):
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    dm = MaskFolderDataModule(str(mask_folder(tmp_path / "m")), image_size=32, num_classes=3)
    dm.setup()
    sizes = [len(s) for s in (dm.train_set, dm.val_set, dm.test_set)]
    assert sum(sizes) == 24 and min(sizes) >= 1
    batches = list(dm.loader(dm.test_set, train=False))
    assert len(batches) == len(dm.test_set) and all(len(x) == 1 for x, _ in batches)
    assert max(int(y.max()) for _, y in dm.test_set) == 2 and 0 < dm.mean[0] < 1


def test_dice_is_per_item():
    """Two items, one perfect and one all wrong: the mean is 0.5, not a pooled Dice."""
    import torch

    from litlab.domains.segmentation2d.module import ItemDice

    metric = ItemDice(2)
    truth = torch.zeros(3, 4, 4, dtype=torch.long)
    truth[:, :2] = 1
    metric.update(truth, truth)  # one item of 3 slices
    metric.update(1 - truth[:1], truth[:1])
    assert float(metric.compute()) == pytest.approx(0.5)


def test_the_service_pads_a_smaller_image_and_refuses_a_larger_one():
    from litlab.serving import images
    from litlab.serving.inputs import BadRequest

    layout = {
        "channels": 1,
        "image_size": 8,
        "fit": "pad",
        "x": {"normalization": {"mean": [0.0], "std": [1.0]}},
    }
    small = Image.fromarray(np.full((4, 6), 255, np.uint8))
    x = images.decode(small, layout)
    assert x.shape == (1, 8, 8) and x.sum() == 24 and x[0, 2:6, 1:7].min() == 1
    with pytest.raises(BadRequest, match="9x4; this model takes images of at most 8x8"):
        images.decode(Image.fromarray(np.zeros((4, 9), np.uint8)), layout)


def test_masks_answer_a_label_map_per_image_and_stratify_by_structure():
    from litlab.tasks.image_segmentation import Masks

    probs = np.zeros((2, 3, 2, 2))
    probs[0, 1], probs[1, 2] = 1, 1
    assert Masks.answer(["0", "a", "b"], probs)["masks"] == [[[1, 1], [1, 1]], [[2, 2], [2, 2]]]
    labels = np.zeros((3, 2, 2), np.uint8)
    labels[1, 0], labels[2] = 2, 1
    assert Masks.strata(labels, labels[:1])[0].tolist() == [0, 2, 1]


def test_a_label_map_is_answered_at_its_images_size():
    """A padded upload's label map is cut back out of the model's canvas (the image was centred
    on it); a resized one is resized back, nearest label; one value per image is left alone."""
    from litlab.tasks.image_segmentation import Masks
    from litlab.tasks.regression import Values

    canvas = np.zeros((6, 6), np.uint8)
    canvas[1:4, 1:5] = np.arange(12).reshape(3, 4)  # a 4 wide, 3 high image, centred as padded
    answer = {"masks": [canvas.tolist(), canvas.tolist()], "classes": ["0", "a"]}
    fitted = Masks.at_image_sizes(answer, [(4, 3), (6, 6)], "pad")
    assert fitted["masks"][0] == np.arange(12).reshape(3, 4).tolist()
    assert fitted["masks"][1] == canvas.tolist() and fitted["classes"] == ["0", "a"]
    resized = Masks.at_image_sizes({"masks": [[[0, 1], [2, 3]]]}, [(4, 2)], "resize")
    assert resized["masks"][0] == [[0, 0, 1, 1], [2, 2, 3, 3]]
    values = {"predictions": [1.5]}
    assert Values.at_image_sizes(values, [(4, 2)], None) is values


def test_a_label_map_answers_as_a_png_when_asked():
    """`Accept: image/png`: one image's label map as an 8-bit PNG; two images a 422; a model
    whose answer is no label map a 406."""
    import io

    from litlab.serving.app import _png
    from litlab.serving.inputs import BadRequest
    from litlab.tasks.image_segmentation import Masks
    from litlab.tasks.regression import Values

    png = _png(Masks(), {"masks": [[[0, 1, 2], [2, 1, 0]]], "classes": ["0", "a", "b"]})
    assert np.asarray(Image.open(io.BytesIO(png))).tolist() == [[0, 1, 2], [2, 1, 0]]
    with pytest.raises(BadRequest) as err:
        _png(Masks(), {"masks": [[[0]], [[1]]]})
    assert err.value.status == 422 and "one image a request" in str(err.value)
    with pytest.raises(BadRequest) as err:
        _png(Values(), {"predictions": [1.0]})
    assert err.value.status == 406


@pytest.mark.slow  # about a minute on 2 cores
def test_a_mask_folder_trains_exports_serves_and_quantizes(tmp_path):
    """data=masks through train (Dice of a learnable task), eval, export (fp32 + int8),
    one HTTP request to src/serve.py answering a label map, compress=quantize."""
    from helpers import serve

    root = mask_folder(tmp_path / "m", count=80)
    logs = tmp_path / "logs"
    common = [f"paths.log_dir={logs}", "extras.print_config=false"]

    def run(*args):
        done = subprocess.run(
            [sys.executable, *args, *common], cwd=ROOT, capture_output=True, text=True,
            timeout=900, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    run("src/train.py", "model=unet2d", "data=masks", f"data.root={root}", "data.num_classes=3",
        "data.image_size=32", "data.batch_size=8", "trainer.max_epochs=20",
        "callbacks=inspect")  # fmt: skip
    train = next(logs.glob("train/runs/*"))
    assert json.loads((train / "metrics.json").read_text())["test/dice"] > 0.85  # 0.96 here
    assert (train / "inspect" / "samples.png").is_file()
    best = next((train / "checkpoints").glob("epoch_*.ckpt"))
    run("src/eval.py", f"ckpt_path={best}")
    run("src/export.py", f"ckpt_path={best}", "formats=[onnx,onnx_int8]")
    model = next(logs.glob("export/runs/*/model.onnx"))
    server, url = serve.start(model, logs)
    try:
        image = np.asarray(Image.open(root / "images" / "000.png"))[2:30, 3:29]  # 26x28
        body, kind = serve.multipart([("slice.png", serve.png(image))])
        status, reply = serve.request(f"{url}/predict", body, kind)
        assert status == 200 and reply["classes"] == ["0", "1", "2"], reply
        mask = np.asarray(reply["masks"][0])  # the image's size: the padding cropped off
        truth = np.asarray(Image.open(root / "masks" / "000.png"))[2:30, 3:29]
        assert mask.shape == (28, 26) and (mask == truth).mean() > 0.9
        status, png = serve.request(f"{url}/predict", body, kind, {"Accept": "image/png"})
        assert status == 200 and (np.asarray(Image.open(io.BytesIO(png))) == mask).all()
    finally:
        server.terminate()
        server.wait(30)
    run("src/compress.py", f"ckpt_path={best}", "compress=quantize")
    report = json.loads(next(logs.glob("compress/runs/*/compress_report.json")).read_text())
    assert "int8 kept" in json.dumps(report)


@pytest.mark.slow  # reads 260 volumes: about a minute on 2 cores
def test_the_hippocampus_slices_experiment_runs_as_printed(tmp_path):
    """`python src/train.py experiment=unet2d_hippocampus` reads `paths.data_dir`/Hippocampus
    (a link to the shared copy here), splits by volume and tests whole volumes."""
    from helpers.runs import require_shared

    data = tmp_path / "data"
    data.mkdir()
    (data / "Hippocampus").symlink_to(require_shared("Hippocampus"))
    logs = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "src/train.py", "experiment=unet2d_hippocampus",
         f"paths.data_dir={data}", f"paths.log_dir={logs}", "trainer.max_epochs=1",
         "trainer.limit_train_batches=80", "extras.print_config=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = next(logs.glob("hippocampus2d/runs/*"))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["test/dice"] > 0.1  # 80 steps (0.06 after 30); 10 epochs: BENCHMARKS.md
    assert "test   dice" in done.stdout  # (52 test volumes, one batch each)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_label_map_is_at_the_size_the_upload_is_shown_at(orientation):
    """A camera's picture stored turned (EXIF orientations 5-8 swap its sides) is read upright,
    so its label map is cut at the upright size, taken before decoding (which may shrink a
    JPEG)."""
    import io

    from litlab.serving.images import check_header, prepare

    upright = Image.fromarray(np.arange(24, dtype=np.uint8).reshape(4, 6))  # 6 wide, 4 high
    turns = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
             6: "ROTATE_90", 7: "TRANSVERSE", 8: "ROTATE_270"}  # fmt: skip
    stored = upright.transpose(Image.Transpose[turns[orientation]]) if orientation > 1 else upright
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    stored.save(buffer, "PNG", exif=exif)
    head = check_header(buffer.getvalue(), 1 << 20)
    image, shown = prepare(head, 8)
    assert shown == (6, 4) == image.size
