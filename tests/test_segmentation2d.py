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
import pandas as pd
import pytest
from helpers.masks import mask_folder, nifti_folder
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
    from litlab.tasks.checks import BadRequest

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
    from litlab import tasks
    from litlab.tasks.image_segmentation import Masks

    canvas = np.zeros((6, 6), np.uint8)
    canvas[1:4, 1:5] = np.arange(12).reshape(3, 4)  # a 4 wide, 3 high image, centred as padded
    answer = {"masks": [canvas.tolist(), canvas.tolist()], "classes": ["0", "a"]}
    fitted = Masks.at_image_sizes(answer, [(4, 3), (6, 6)], "pad")
    assert fitted["masks"][0] == np.arange(12).reshape(3, 4).tolist()
    assert fitted["masks"][1] == canvas.tolist() and fitted["classes"] == ["0", "a"]
    resized = Masks.at_image_sizes({"masks": [[[0, 1], [2, 3]]]}, [(4, 2)], "resize")
    assert resized["masks"][0] == [[0, 0, 1, 1], [2, 2, 3, 3]]
    values = {"predictions": [1.5]}
    assert tasks.get("regression").at_image_sizes(values, [(4, 2)], None) is values


def test_a_label_map_answers_as_a_png_when_asked():
    """`Accept: image/png`: one image's label map as an 8-bit PNG; two images a 422; a model
    whose answer is no label map a 406."""
    import io

    from litlab import tasks
    from litlab.serving.app import _png
    from litlab.tasks.checks import BadRequest

    png = _png(
        tasks.get("image_segmentation"),
        {"masks": [[[0, 1, 2], [2, 1, 0]]], "classes": ["0", "a", "b"]},
    )
    assert np.asarray(Image.open(io.BytesIO(png))).tolist() == [[0, 1, 2], [2, 1, 0]]
    with pytest.raises(BadRequest) as err:
        _png(tasks.get("image_segmentation"), {"masks": [[[0]], [[1]]]})
    assert err.value.status == 422 and "one image a request" in str(err.value)
    with pytest.raises(BadRequest) as err:
        _png(tasks.get("regression"), {"predictions": [1.0]})
    assert err.value.status == 406


@pytest.mark.slow  # about a minute on 2 cores
def test_a_mask_folder_trains_exports_serves_and_quantizes(tmp_path, capfd):
    """data=masks through train (Dice of a learnable task), eval, export (fp32 + int8),
    one HTTP request to src/serve.py answering a label map, compress=quantize. train.py and
    serve.py run as processes; eval, export and compress in this one (`command_in_process`:
    their scripts and exit codes, without three interpreters' start-up)."""
    from helpers import serve
    from helpers.runs import command_in_process

    root = mask_folder(tmp_path / "m", count=80)
    logs = tmp_path / "logs"
    common = [f"paths.log_dir={logs}", "extras.print_config=false"]

    def run(script, *args):
        if script != "src/train.py":
            code, out, err = command_in_process(
                script.removeprefix("src/"), [*args, common[1]], logs, capfd, quiet=False
            )
            assert code == 0, out[-2000:] + err[-3000:]
            return
        done = subprocess.run(
            [sys.executable, script, *args, *common], cwd=ROOT, capture_output=True, text=True,
            timeout=900, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    run("src/train.py", "model=unet2d", "data=masks", f"data.root={root}", "data.num_classes=3",
        "data.image_size=32", "data.batch_size=8", "trainer.max_epochs=20",
        "callbacks=inspect")  # fmt: skip
    train = next(logs.glob("train/runs/*"))
    assert json.loads((train / "metrics.json").read_text())["test/dice"] > 0.85  # 0.96 here
    assert (train / "inspect" / "samples.png").is_file()
    best = next((train / "checkpoints").glob("epoch_*.ckpt"))
    run("src/eval.py", f"ckpt_path={best}")
    split = json.loads((train / "data_split.json").read_text())
    rows = pd.read_csv(next(logs.glob("eval/runs/*")) / "predictions.csv")
    assert rows["image"].tolist() == split["test"] and len(split["test"]) == 16
    for image in split["test"]:  # each test image's predicted mask, named by the image
        mask = np.asarray(Image.open(next(logs.glob("eval/runs/*")) / "masks" / image))
        assert mask.shape == (32, 32)
    # the latency tables as the matrix's quick rows time them: batch 1 for 0.2 s a cell (not
    # read here; at the defaults each batch-64 cell runs its 3 s)
    quick = ["latency.batch_sizes=[1]", "latency.budget_s=0.2"]
    run("src/export.py", f"ckpt_path={best}", "formats=[onnx,onnx_int8]", *quick)
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
        example = (ROOT / "examples" / "slice.png").read_bytes()  # docs/deploy.md's request
        status, reply = serve.request(f"{url}/predict", *serve.multipart([("slice.png", example)]))
        assert status == 200 and np.asarray(reply["masks"][0]).shape == (32, 32), reply
    finally:
        server.terminate()
        server.wait(30)
    quick = ["report.batch_sizes=[1]", "report.budget_s=0.2"]  # compress's latency table
    run("src/compress.py", f"ckpt_path={best}", "compress=quantize", *quick)
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


def _docs_snippet() -> str:
    """docs/deploy.md's snippet that writes a served PNG from a NIfTI slice."""
    import re

    text = (ROOT / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    return next(b for b in blocks if "nib.load(" in b)


def test_the_docs_snippet_writes_the_slice_training_reads_and_serving_reads_it_so(
    tmp_path, monkeypatch
):
    """A slice written by docs/deploy.md's snippet is, read by the service, the input training
    fed the net (8-bit rounding aside); windowed at the slice's extremes instead, it is not."""
    import shutil

    import nibabel as nib
    import torch

    from litlab.domains.segmentation2d.data import Hippocampus2DDataModule
    from litlab.domains.segmentation2d.slices import crop_to
    from litlab.serving.images import decode

    root = nifti_folder(tmp_path / "nifti", count=4, depth=5)
    monkeypatch.chdir(tmp_path)
    shutil.copy(root / "images" / "v0.nii.gz", tmp_path / "hippocampus_001.nii.gz")
    exec(_docs_snippet(), {})  # noqa: S102 (the page's code, as a reader runs it)
    dm = Hippocampus2DDataModule(root=str(root), image_size=16)
    dm.setup()
    items, _ = dm.load()
    trained = items[0][0][2]  # slice k = 5 // 2 of v0, padded to 16x16, in [0, 1]
    png = Image.open(tmp_path / "slice.png")
    assert png.size == (10, 12)  # a slice's rows are the volume's first axis
    pixels = np.asarray(png) / 255
    assert np.abs(pixels - crop_to(trained[0].numpy(), (12, 10))).max() <= 0.5 / 255 + 1e-6
    layout = {"channels": 1, "image_size": 16, "fit": "pad"}
    layout["x"] = {"normalization": {"mean": list(dm.mean), "std": list(dm.std)}}
    served = decode(png, layout)
    fed = dm.on_after_batch_transfer((trained[None], torch.zeros(1, 16, 16)), 0)[0][0]
    assert np.abs(served - fed.numpy()).max() <= 0.5 / 255 / dm.std[0] + 1e-5
    volume = np.asarray(nib.load(root / "images" / "v0.nii.gz").dataobj)[..., 2]
    extremes = (volume - volume.min()) / (volume.max() - volume.min())
    assert np.abs(extremes - pixels).max() > 0.1  # min-max windowing: another input


def test_the_example_slice_is_a_phantom_slice_windowed_as_training():
    """examples/slice.png: the generated phantom 0 (seed 0, 32^3), its slice with the most
    nodule, windowed at the volume's percentiles (so anyone can remake it)."""
    from litlab.domains.medical3d.volumes import phantom
    from litlab.domains.segmentation2d.slices import window

    image, label, _ = phantom(0, 0, (32, 32, 32))
    k = int((label[0] == 2).sum((0, 1)).argmax())
    expected = np.round(window(image[0])[..., k] * 255).astype(np.uint8)
    path = ROOT / "examples" / "slice.png"
    assert (np.asarray(Image.open(path)) == expected).all() and path.stat().st_size < 4096


def test_served_classes_are_the_names_the_datas_dataset_json_gives(tmp_path):
    """What export stores as `classes` (and the service answers) for a NIfTI folder: the MSD
    dataset.json's label names (nnU-Net's form too); none: the numbers; bad ones: one line."""
    from types import SimpleNamespace

    from litlab import tasks
    from litlab.domains.medical3d.data import NiftiDataModule
    from litlab.domains.segmentation2d.data import Hippocampus2DDataModule

    def output_names(run, dm, _kind):
        return tasks.of(dm).names(run.model, dm)

    root, model = nifti_folder(tmp_path / "n", count=4), SimpleNamespace(num_classes=3)
    dm = Hippocampus2DDataModule(root=str(root), image_size=16)
    assert output_names(SimpleNamespace(model=model), dm, dm.kind) == ["0", "1", "2"]
    labels = {"0": "background", "1": "Anterior", "2": "Posterior"}
    (root / "dataset.json").write_text(json.dumps({"name": "Hippocampus", "labels": labels}))
    dm = Hippocampus2DDataModule(root=str(root), image_size=16)
    assert output_names(SimpleNamespace(model=model), dm, dm.kind) == list(labels.values())
    flipped = {"labels": {v: int(k) for k, v in labels.items()}}  # nnU-Net v2
    (root / "dataset.json").write_text(json.dumps(flipped))
    dm3 = NiftiDataModule(root=str(root), num_classes=3)
    assert output_names(SimpleNamespace(model=model), dm3, dm3.kind) == list(labels.values())
    (root / "dataset.json").write_text(json.dumps({"labels": {"0": "bg", "1": "a"}}))
    with pytest.raises(UserError) as err:
        Hippocampus2DDataModule.check_settings({"root": str(root), "num_classes": 3}, "data")
    assert str(err.value) == (
        f'{root}/dataset.json: its labels {{"0": "bg", "1": "a"}} do not fit; valid: a name for '
        "each label 0 to 2 (data.num_classes=3)"
    )


def _sliced_folder(root, volumes: int = 8, slices: int = 3):
    """A mask folder of `volumes` x `slices` images named <volume>_slice<k>.png."""
    mask_folder(root, count=volumes * slices)
    for folder in ("images", "masks"):
        for i, path in enumerate(sorted((root / folder).iterdir())):
            path.rename(path.with_name(f"vol{i // slices}_slice{i % slices}.png"))
    return root


@pytest.mark.parametrize("num_folds", [None, 4])
def test_data_group_keeps_a_volumes_slices_in_one_split(tmp_path, num_folds):
    """`data.group='^(.*)_slice'`: every volume's slices in one split (one test fold each under
    k-fold); without it, slices of one volume land in train and test."""
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    root = _sliced_folder(tmp_path / "m")

    def volumes(dm, split):
        return {name.split("_")[0] for name in dm.split_sources[split]}

    tested = []
    for fold in range(num_folds or 1):
        settings = {"num_folds": num_folds, "fold": fold} if num_folds else {}
        dm = MaskFolderDataModule(str(root), group="^(.*)_slice", image_size=32, **settings)
        dm.setup()
        sets = [volumes(dm, s) for s in ("train", "val", "test")]
        assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2]), sets
        assert sum(len(s) for s in sets) == 8
        tested += sorted(sets[2])
    if num_folds:
        assert sorted(tested) == [f"vol{i}" for i in range(8)]  # each volume tested once
    else:
        loose = MaskFolderDataModule(str(root), image_size=32, seed=1)
        loose.setup()
        assert volumes(loose, "train") & volumes(loose, "test")  # what data.group prevents


GROUP_REFUSALS = {
    "(": "data.group='(' is not a regular expression (missing ), unterminated subpattern at "
    "position 0); valid: a regex on the image file names",
    "^x(.*)_": "data.group='^x(.*)_' matches none of the 24 image names (e.g. vol0_slice0.png); "
    "valid:",
    "^(vol[0-6])_": "data.group='^(vol[0-6])_' does not match vol7_slice0.png (3 of 24 images): "
    "every image needs a group",
    "slice": "data.group='slice' puts the 24 images in one group ('slice'); train, val and test "
    "need at least 3",
}


@pytest.mark.parametrize("group", list(GROUP_REFUSALS))
def test_a_bad_data_group_is_one_line(group, tmp_path):
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    root = _sliced_folder(tmp_path / "m")
    with pytest.raises(UserError) as err:
        MaskFolderDataModule.check_settings({"root": str(root), "group": group}, "data")
    says = str(err.value)
    assert says.startswith(GROUP_REFUSALS[group]) and "\n" not in says, says
    assert says.endswith("e.g. '^(.*)_slice' for <volume>_slice<k>.png")


def test_a_bad_data_group_stops_training_before_anything_is_written(tmp_path):
    """As the command line gives it (Hydra's quotes), refused before the run starts."""
    from helpers.runs import run_dirs

    from litlab import api

    root, logs = _sliced_folder(tmp_path / "m"), tmp_path / "logs"
    args = ["model=unet2d", "data=masks", f"data.root={root}", "data.num_classes=3"]
    args.append(f"paths.log_dir={logs}")
    with pytest.raises(UserError, match=r"^data.group='\(\.\*\)_slice9' matches none of the 24"):
        api.train([*args, "data.group='(.*)_slice9'"])
    assert run_dirs(logs) == [] and not list(logs.rglob("*.ckpt"))
