"""Values checked where they will be used (issue 46): a table's values in the net's float32 and
after its standardization, a mask's values as class numbers in a lossless file, image and
volume files that are regular files, `data.image_size` against the net's strides and the
machine's memory; all-background masks and a constant target warned about. Each case is a tiny
file in tmp_path read by the datamodule or the config check in process (no training).
Refusals are one line naming the file, column or key and what is valid."""

import logging
import os
import threading
import time

import numpy as np
import pytest
from helpers.masks import mask_folder
from PIL import Image

from litlab.config.compose import compose
from litlab.errors import UserError


def one_line(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as err:
        call(*args, **kwargs)
    message = str(err.value)
    assert message and "\n" not in message, message
    return message


def fifo(path):
    """A named pipe at `path`. A reader that opens it blocks until a writer comes: a thread
    comes every second for a minute (and leaves at once), so a check that fails to refuse the
    pipe fails its test instead of hanging the suite."""
    os.mkfifo(path)

    def writer():
        for _ in range(60):
            time.sleep(1)
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader yet (ENXIO), or the pipe is gone
                continue

    threading.Thread(target=writer, daemon=True).start()
    return path


# ---------------------------------------------------------------------------------- tables
ROWS = 60


def table(path, columns: dict, target=None):
    """A CSV of `columns` (name: values, written exactly as given) and a target `y` that a
    linear model fits (or `target`)."""
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(ROWS, 2))
    data = {"a": noise[:, 0], "b": noise[:, 1], **columns}
    y = noise @ [1.0, 2.0] if target is None else target
    with open(path, "w") as f:
        f.write(",".join([*data, "y"]) + "\n")
        f.writelines(",".join(_cell(v[i]) for v in (*data.values(), y)) + "\n" for i in range(ROWS))
    return str(path)


def _cell(value) -> str:
    """An int as its digits (2**40 + 1 exactly), a float as Python reads it back."""
    return str(value) if isinstance(value, int) else repr(float(value))


def standardized(dm):
    """The training rows' features as the net sees them (its first op), float32."""
    from litlab.domains.table.nets import TableMLP

    net = TableMLP(**dm.dims)
    dm.setup()
    x, y = dm.train_set.tensors
    return ((x - net.feature_mean) / net.feature_std).numpy(), net, x, y


SCALED = np.random.default_rng(1).normal(size=ROWS)
TABLES = {  # name: (extra columns, target, words of the refusal)
    "a cell of 1e39": (
        {"c": [*[1.0] * 3, 1e39, *[2.0] * (ROWS - 4)]},
        None,
        "column 'c', row 4: 1e+39 is beyond float32, the net's dtype (magnitudes up to 3.4e+38)",
    ),
    "a target at 1e30": (
        {},
        SCALED * 1e30,
        "the target 'y', row 1: 3.45584e+29 is too large for the metrics in float32",
    ),
    "int64 ids beyond float32's precision": (
        {"id": [2**40 + i for i in range(ROWS)]},
        None,
        (
            "column 'id': its values (near 1.09951e+12, spread 17.9) differ by less than float32, "
            "the net's dtype, resolves at that magnitude (row 60's 1099511627835 reads as "
            "1099511627776); subtract an offset from the column (e.g. its minimum, 1099511627776)"
        ),
    ),
    "values that overflow once centred": (
        {"c": [-3e38 if i == 7 else 3e38 for i in range(ROWS)]},
        None,
        "column 'c', row 8: -3e+38 overflows float32 (the net's dtype) once standardized",
    ),
    "a target near 2**40 that varies by units": (
        {},
        np.arange(ROWS) + 2.0**40,
        "column 'y': its values (near 1.09951e+12, spread 17.2) differ by less than float32",
    ),
}


@pytest.mark.parametrize("name", list(TABLES))
def test_table_values_lost_in_float32_are_refused_naming_column_and_row(name, tmp_path):
    from litlab.domains.table.data import TableDataModule

    columns, target, words = TABLES[name]
    path = table(tmp_path / "t.csv", columns, target)
    message = one_line(TableDataModule, path=path)
    assert message.startswith(f"data.path={path}: ") and words in message, message


def test_table_columns_at_any_scale_reach_the_net_standardized(tmp_path):
    """A column at 1e30 (its squares overflow float32), one at 1e-30 and a constant one: the
    first two reach the net with unit spread (before: 0, silently), the constant one as 0."""
    import torch

    from litlab.domains.table.data import TableDataModule

    columns = {"huge": SCALED * 1e30, "tiny": SCALED * 1e-30, "same": [0.1] * ROWS}
    dm = TableDataModule(path=table(tmp_path / "t.csv", columns, target=SCALED * 1e15))
    z, net, x, y = standardized(dm)
    assert np.isfinite(z).all()
    assert z[:, 2:4].std(0) == pytest.approx([1.0, 1.0], abs=0.05)
    assert (z[:, 4] == 0).all()  # equal values: nothing, not noise divided by 1e-8
    from litlab.domains.table.module import Regressor

    module = Regressor(net, optimizer=None)
    with torch.no_grad():
        loss = module.task_loss(net(x), y)  # training's loss at step 0, and its metrics
        metrics = module.make_metrics()
        metrics.update(net(x)[:, 0], y)
    assert np.isfinite(float(loss)) and all(
        np.isfinite(float(v)) for v in metrics.compute().values()
    )


def test_a_constant_target_is_warned_about_once(tmp_path, caplog):
    from litlab.domains.table.data import TableDataModule

    with caplog.at_level(logging.WARNING):
        TableDataModule(path=table(tmp_path / "t.csv", {}, target=np.full(ROWS, 3.0)))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert lines == [
        (
            f"data.path={tmp_path / 't.csv'}: the target 'y' is 3 in every row: there is nothing "
            "to learn, and r2 is undefined (printed as 0)"
        )
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        TableDataModule(path=table(tmp_path / "u.csv", {}))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


# ----------------------------------------------------------------------------------- masks
def folder(tmp_path, count: int = 6):
    return mask_folder(tmp_path / "m", count=count)


def mask_refusal(root, **settings) -> str:
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    settings = {"root": str(root), "num_classes": 3, **settings}
    return one_line(MaskFolderDataModule.check_settings, settings, "data")


def _float_mask(root, value):
    (root / "masks" / "001.png").unlink()
    Image.fromarray(np.full((32, 32), value, np.float32)).save(root / "masks" / "001.tif")


def _jpeg_mask(root):
    Image.open(root / "images" / "001.png").save(root / "images" / "001.jpg")
    (root / "images" / "001.png").unlink()
    (root / "masks" / "001.png").rename(root / "masks" / "001.bak")
    Image.open(root / "masks" / "001.bak").save(root / "masks" / "001.jpg")


def _jpeg_tiff_mask(root):
    mask = Image.open(root / "masks" / "001.png")
    (root / "masks" / "001.png").unlink()
    mask.save(root / "masks" / "001.tif", compression="jpeg")


def _sixteen_bit_white(root):
    mask = np.asarray(Image.open(root / "masks" / "001.png"))
    Image.fromarray((mask > 0).astype(np.uint16) * 65535).save(root / "masks" / "001.png")


def _jpeg_named_png(root):
    Image.open(root / "masks" / "001.png").save(root / "masks" / "001.png", format="JPEG")


def _smaller_mask(root):
    Image.fromarray(np.zeros((30, 32), np.uint8)).save(root / "masks" / "001.png")


def _fifo_image(root):
    fifo(root / "images" / "009.png")


def _dev_zero_image(root):
    os.symlink("/dev/zero", root / "images" / "009.png")


def _fifo_mask(root):
    (root / "masks" / "001.png").unlink()
    fifo(root / "masks" / "001.png")


def _float_image(root):
    (root / "images" / "001.png").unlink()
    Image.fromarray(np.full((32, 32), 2.0, np.float32)).save(root / "images" / "001.tif")
    (root / "masks" / "001.png").rename(root / "masks" / "001.tif")


MASKS = {  # name: (how the folder is spoiled, words of the refusal after root)
    "a float mask of 0.5": (
        lambda r: _float_mask(r, 0.5),
        "masks/001.tif holds label 0.5; labels are whole numbers 0 to 2",
    ),
    "a NaN mask": (lambda r: _float_mask(r, np.nan), "masks/001.tif holds label nan"),
    "a JPEG mask": (_jpeg_mask, "masks/001.jpg is a JPEG file: lossy compression changes"),
    "a JPEG in a .png": (_jpeg_named_png, "masks/001.png is a JPEG file: lossy"),
    "a JPEG-compressed TIFF mask": (_jpeg_tiff_mask, "masks/001.tif is a JPEG-compressed TIFF"),
    "a 16-bit mask of 0 and 65535": (
        _sixteen_bit_white,
        (
            "masks/001.png holds label 65535; labels are whole numbers 0 to 2 (data.num_classes=3, "
            "background included): a label map holds class numbers, not grey levels"
        ),
    ),
    "a mask of another size": (_smaller_mask, "masks/001.png has shape [30, 32], its image"),
    "a pipe among the images": (_fifo_image, ": images/009.png is not a regular file (a pipe)"),
    "a link to /dev/zero": (_dev_zero_image, ": images/009.png is not a regular file (a device)"),
    "a pipe as a mask": (_fifo_mask, ": masks/001.png is not a regular file (a pipe)"),
    "a float image out of [0, 1]": (_float_image, "images/001.tif is a float image with values"),
}


@pytest.mark.parametrize("name", list(MASKS))
def test_a_mask_folder_value_that_would_break_later_is_refused_naming_the_file(name, tmp_path):
    root = folder(tmp_path)
    spoil, words = MASKS[name]
    spoil(root)
    message = mask_refusal(root)
    assert words in message and str(root) in message, message


def test_masks_in_any_lossless_integer_form_read_as_their_classes(tmp_path):
    """16-bit, palette, 1-bit and whole-number float masks hold the labels drawn; a JPEG photo
    takes its PNG mask; a 16-bit image is scaled by 65535 as the service scales it (not
    clipped at 255)."""
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    root = folder(tmp_path)
    drawn = {n: np.asarray(Image.open(root / "masks" / f"00{n}.png")) for n in range(5)}
    Image.fromarray(drawn[0].astype(np.uint16)).save(root / "masks" / "000.png")
    Image.fromarray(drawn[1]).convert("P").save(root / "masks" / "001.png")
    Image.fromarray(drawn[2] > 0).save(root / "masks" / "002.png")  # 1-bit: 0 and 1
    drawn[2] = (drawn[2] > 0).astype(np.uint8)
    (root / "masks" / "003.png").unlink()
    Image.fromarray(drawn[3].astype(np.float32)).save(root / "masks" / "003.tif")
    Image.open(root / "images" / "004.png").save(root / "images" / "004.jpg", quality=95)
    (root / "images" / "004.png").unlink()
    grey = np.asarray(Image.open(root / "images" / "005.png"))
    Image.fromarray(grey.astype(np.uint16) * 257).save(root / "images" / "005.png")
    dm = MaskFolderDataModule(str(root), image_size=32, num_classes=3)
    items, names = dm.load()
    got = dict(zip(names, items, strict=True))
    assert Image.open(root / "masks" / "001.png").mode == "P"
    for n, labels in drawn.items():
        assert (got[f"00{n}.{'jpg' if n == 4 else 'png'}"][1][0].numpy() == labels).all(), n
    assert float(got["005.png"][0].max()) == pytest.approx(grey.max() / 255, abs=1e-4)


def test_a_class_no_mask_holds_is_warned_about(tmp_path, caplog):
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    root = folder(tmp_path)
    for mask in (root / "masks").iterdir():
        Image.fromarray(np.zeros((32, 32), np.uint8)).save(mask)
    with caplog.at_level(logging.WARNING):
        MaskFolderDataModule(str(root), image_size=32, num_classes=3).setup()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        (
            f"data.root={root}: every label map is background (label 0) only: there is nothing to "
            "segment, and the Dice will stay 0"
        )
    ]
    Image.fromarray(np.ones((32, 32), np.uint8)).save(root / "masks" / "000.png")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        MaskFolderDataModule(str(root), image_size=32, num_classes=3).setup()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "label 2 occurs in no label map (data.num_classes=3)" in warned[0]


# ------------------------------------------------------------------------------ image_size
def _refused(overrides, tmp_path) -> str:
    from litlab.config import validate

    cfg = compose("train", overrides, output_dir=tmp_path / "run")
    return one_line(validate.check, cfg, "train")


@pytest.mark.parametrize(
    "value,words",
    [
        ("60000", "data.image_size=60000 has the wrong type or value; valid: an integer from 1"),
        ("0", "data.image_size=0 has the wrong type or value"),
        ("-32", "data.image_size=-32 has the wrong type or value"),
        ("32.5", "data.image_size=32.5 has the wrong type or value"),
        ("1", "000.png: 32x32 is larger than data.image_size=1; set data.image_size=32 or more"),
    ],
)
def test_image_size_out_of_its_range_is_refused_before_any_image_is_padded(value, words, tmp_path):
    root = folder(tmp_path)
    overrides = ["model=unet2d", "data=masks", f"data.root={root}", "data.num_classes=3"]
    overrides.append(f"data.image_size={value}")
    assert words in _refused(overrides, tmp_path)


def test_image_size_is_checked_against_the_nets_strides_before_training(tmp_path):
    from litlab.config import build

    root = folder(tmp_path)
    cfg = compose(
        "train",
        ["model=unet2d", "data=masks", f"data.root={root}", "data.num_classes=3"]
        + ["data.image_size=36"],
        output_dir=tmp_path / "run",
    )
    message = one_line(build.model, cfg, build.datamodule(cfg))
    assert message == (
        "data.image_size=36 does not fit model.net.strides=[2, 2, 2]: it must be a multiple of "
        "8 (e.g. 40), at most 4096"
    )
    cfg.model.net.strides = [2, 2]
    cfg.model.net.channels = [8, 16, 32]
    cfg.data.image_size = 36
    assert build.model(cfg, build.datamodule(cfg)) is not None  # 36 = 4 x 9: it fits


def test_what_the_data_would_take_in_memory_is_checked_against_the_machine(tmp_path, monkeypatch):
    from litlab.domains.vision.data import ImageFolderDataModule

    monkeypatch.setattr("litlab.data.budget", lambda: 2**30)  # a machine of 2 GiB
    root = folder(tmp_path, count=24)
    assert mask_refusal(root, image_size=4096) == (
        "data.image_size=4096 pads each of the 24 images to 4096x4096: they take 3.8 GiB in "
        "memory, more than 50% of this machine's 2.0 GiB; set data.image_size to the largest "
        "side of the items (it only needs to hold them)"
    )
    for name in ("cat", "dog"):
        (tmp_path / "f" / name).mkdir(parents=True)
    settings = {"root": str(tmp_path / "f"), "image_size": 2048, "batch_size": 64}
    message = one_line(ImageFolderDataModule.check_settings, settings, "data")
    assert message.startswith("data.image_size=2048: batches of 64 images of 3x2048x2048 take")


# -------------------------------------------------------- other image and volume folders
def test_vision_and_nifti_folders_refuse_a_file_that_is_not_a_regular_file(tmp_path):
    from litlab.domains.medical3d.nifti import find_pairs
    from litlab.domains.vision.data import ImageFolderDataModule

    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        for i in range(4):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(tmp_path / name / f"{i}.png")
    os.symlink("/dev/zero", tmp_path / "dog" / "zero.png")
    dm = ImageFolderDataModule(root=str(tmp_path), image_size=8)
    assert one_line(dm.setup) == (
        f"image {tmp_path}/dog/zero.png is not a regular file (a device); a class folder holds "
        "image files"
    )
    (tmp_path / "dog" / "zero.png").unlink()
    fifo(tmp_path / "cat" / "pipe.png")
    dm = ImageFolderDataModule(root=str(tmp_path), image_size=8)
    assert "cat/pipe.png is not a regular file (a pipe)" in one_line(dm.setup)

    vols = tmp_path / "vols"
    (vols / "imagesTr").mkdir(parents=True)
    (vols / "labelsTr").mkdir()
    for i in range(3):
        (vols / "imagesTr" / f"case_{i}.nii.gz").touch()
        (vols / "labelsTr" / f"case_{i}.nii.gz").touch()
    (vols / "labelsTr" / "case_1.nii.gz").unlink()
    fifo(vols / "labelsTr" / "case_1.nii.gz")
    assert one_line(find_pairs, vols) == (
        f"data.root={vols}: labelsTr/case_1.nii.gz is not a regular file (a pipe); a NIfTI file"
    )


def test_nifti_slices_that_would_not_fit_in_memory_are_refused_from_the_headers(
    tmp_path, monkeypatch
):
    """`data=hippocampus2d`: the slice count is read from the headers, before any voxel."""
    import nibabel as nib

    from litlab.domains.segmentation2d.data import Hippocampus2DDataModule

    for folder in ("imagesTr", "labelsTr"):
        (tmp_path / folder).mkdir()
    for i in range(3):
        for folder in ("imagesTr", "labelsTr"):
            volume = nib.Nifti1Image(np.zeros((8, 8, 5), np.float32), np.eye(4))
            nib.save(volume, tmp_path / folder / f"case_{i}.nii.gz")
    monkeypatch.setattr("litlab.data.budget", lambda: 2**30)
    monkeypatch.setattr("litlab.domains.medical3d.nifti.read_nifti", lambda p: pytest.fail(p))
    dm = Hippocampus2DDataModule(str(tmp_path), image_size=4096)
    assert one_line(dm.load).startswith(
        "data.image_size=4096 pads each of the 15 slices to 4096x4096: they take 2.3 GiB"
    )


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["data=imagefolder", "data.root={root}", "data.image_size=60000"], "from 1 to 4096"),
        (["model=unet3d", "data.patch_size=[2048,32,32]"], "integers from 1 to 1024 (voxels)"),
        (["model=unet3d", "data.num_classes=300"], "an integer from 2 to 256"),
        (["model=unet3d", "data.size=8"], "data.size=8 with data.size_jitter=4 makes phantoms"),
        (["model=unet3d", "data.size=1000"], "phantoms of up to 1004^3 voxels take"),
    ],
)
def test_sides_and_classes_beyond_what_the_data_can_hold_are_refused(overrides, words, tmp_path):
    for name in ("cat", "dog"):
        (tmp_path / "f" / name).mkdir(parents=True)
    message = _refused([o.format(root=tmp_path / "f") for o in overrides], tmp_path)
    assert words in message, message
