"""Hostile and careless data (issue 46, second red team): tables and mask folders that would
break after the check, or be read other than they are. Each is refused in one line naming the
file before training, or handled as documented. In process: the data modules' own checks."""

import os
import shutil
import socket

import numpy as np
import pytest
from helpers.masks import mask_folder
from helpers.refusals import raises_one_line
from PIL import Image


def _table(path, rows=40, cell=None):
    """A CSV of 3 features and a target; `cell` (row, column, text) replaces one value."""
    rng = np.random.default_rng(0)
    values = rng.normal(size=(rows, 4)).round(5).astype(str)
    if cell is not None:
        values[cell[0], cell[1]] = cell[2]
    path.write_text("a,b,c,t\n" + "\n".join(",".join(r) for r in values) + "\n")
    return path


def _table_module(path):
    from litlab.domains.table.data import TableDataModule

    TableDataModule.check_settings({"path": str(path)}, "data")
    return TableDataModule(path=str(path))


def test_a_table_that_is_not_utf8_is_refused_naming_it(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b,c,t\n" + "\xe9,1,2,3\n".encode("latin-1") * 20)
    raises_one_line(lambda: _table_module(path), str(path), "not UTF-8")


@pytest.mark.parametrize(
    "text, words",
    [
        ("3.5e38", ("beyond float32", "column 'a'")),
        ("-inf", ("finite numbers",)),
        ("nan", ("finite numbers",)),
        ("1e309", ("finite numbers",)),
        ("0x10", ("not a table of numbers",)),
        ("", ("not a table of numbers",)),
        ("1e-44", ("float32",)),
    ],
)
def test_table_cells_that_break_in_float32_areraises_one_line(tmp_path, text, words):
    column = 0
    path = _table(tmp_path / "t.csv", cell=(5, column, text))
    if text == "1e-44":  # a column of denormals: float32 cannot tell them apart
        path.write_text(
            "a,b,c,t\n" + "\n".join(f"{i * 1e-45},{i},{-i},{i % 3}" for i in range(40)) + "\n"
        )
    raises_one_line(lambda: _table_module(path), "data.path=", *words)


def test_a_table_of_no_rows_or_a_constant_column_is_handled(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b,c,t\n")
    raises_one_line(lambda: _table_module(empty), "0 rows", "at least 10 rows")
    path = tmp_path / "t.csv"
    rng = np.random.default_rng(1)
    rows = [f"7,{rng.normal():.4f},{rng.normal():.4f},{rng.normal():.4f}" for _ in range(40)]
    path.write_text("a,b,c,t\n" + "\n".join(rows) + "\n")
    assert _table_module(path).x[:, 0].tolist() == [7.0] * 40  # standardizes to 0, as documented


@pytest.fixture(scope="module")
def masks(tmp_path_factory):
    return mask_folder(tmp_path_factory.mktemp("masks") / "m", count=6)


def _mask_check(root):
    from litlab.domains.segmentation2d.data import MaskFolderDataModule

    return MaskFolderDataModule.check_settings(
        {"root": str(root), "num_classes": 3, "image_size": 32}, "data"
    )


def _copy(masks, tmp_path):
    return shutil.copytree(masks, tmp_path / "m")


def test_a_mask_or_image_of_several_frames_is_refused_naming_it(masks, tmp_path):
    root = _copy(masks, tmp_path)
    label = np.asarray(Image.open(root / "masks" / "000.png"))
    (root / "masks" / "000.png").unlink()
    frames = [Image.fromarray(label), Image.fromarray(np.full_like(label, 2))]
    frames[0].save(root / "masks" / "000.gif", save_all=True, append_images=frames[1:])
    raises_one_line(lambda: _mask_check(root), "000.gif", "2 frames")
    image = Image.open(root / "images" / "001.png")
    (root / "images" / "001.png").unlink()
    image.save(root / "images" / "001.tiff", save_all=True, append_images=[image])
    Image.open(root / "masks" / "001.png").save(root / "masks" / "001.tiff")
    (root / "masks" / "000.gif").unlink()
    frames[0].save(root / "masks" / "000.png")
    raises_one_line(lambda: _mask_check(root), "001.tiff", "2 frames")


def _save(array, path, **kw):
    Image.fromarray(array).save(path, **kw)


def _pair(root, name):
    return [root / "images" / name, root / "masks" / name]


def _replace(path, make):
    """`path` (an image or mask) made anew by `make(path)`: another format, a pipe, a link."""
    path.unlink()
    make(path)


def _unix_socket(path):
    server = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(path.parent)  # a relative name: a socket's path holds 108 bytes at most
    try:
        server.bind(path.name)
    finally:
        os.chdir(here)
    server.close()  # the socket file stays


@pytest.mark.parametrize(
    "alter, words",
    [
        (lambda r, lab: _save(lab.astype(np.uint16) * 150, r / "masks/000.png"), ("label 300",)),
        (lambda r, lab: _save(lab, r / "masks/000.png", format="WEBP", lossless=True), ("WEBP",)),
        (
            lambda r, lab: _replace(
                r / "masks/000.png",
                lambda p: _save(np.full(lab.shape, np.nan, np.float32), p.with_suffix(".tif")),
            ),
            ("000.tif", "nan"),
        ),
        (lambda r, lab: _save(np.stack([lab] * 3, -1), r / "masks/000.png"), ("one channel",)),
        (
            lambda r, lab: _replace(r / "images/002.png", lambda p: p.symlink_to("/dev/zero")),
            ("device",),
        ),
        (lambda r, lab: _replace(r / "masks/003.png", os.mkfifo), ("masks/003.png", "pipe")),
        (lambda r, lab: _replace(r / "images/004.png", _unix_socket), ("images/004.png", "socket")),
        (  # a newline in a name: its own line in every message and CSV row that names it
            lambda r, lab: [p.rename(p.with_name(f"0\n{p.name}")) for p in _pair(r, "005.png")],
            ("control character", "0\\n005.png"),
        ),
    ],
)
def test_bad_mask_folders_are_refused_naming_the_file(masks, tmp_path, alter, words):
    root = _copy(masks, tmp_path)
    alter(root, np.asarray(Image.open(root / "masks" / "000.png")))
    raises_one_line(lambda: _mask_check(root), *words)


def test_palette_bmp_and_16_bit_masks_of_whole_classes_are_let_in(masks, tmp_path):
    root = _copy(masks, tmp_path)
    label = np.asarray(Image.open(root / "masks" / "000.png"))
    Image.fromarray(label).convert("P").save(root / "masks" / "000.png")
    (root / "masks" / "001.png").unlink()
    _save(label, root / "masks" / "001.bmp")
    _save(label.astype(np.uint16), root / "masks" / "002.png")
    assert len(_mask_check(root)) == 6


@pytest.mark.parametrize(
    "batch, side, refused", [(16, 64, False), (16, 4096, True), (64, 1024, True)]
)
def test_a_training_step_that_cannot_fit_in_memory_is_refused_before_it_runs(batch, side, refused):
    """data.image_size=4096 passed every bound, then its first U-Net step was OOM-killed."""
    from types import SimpleNamespace

    import torch

    from litlab.data import check_step_memory
    from litlab.domains.segmentation2d.nets import unet2d

    dm = SimpleNamespace(
        hparams=SimpleNamespace(batch_size=batch), image_size=side, channels=1, shapes=[(32, 32)]
    )
    check = lambda: check_step_memory(unet2d(1, 3), dm, torch.device("cpu"))  # noqa: E731
    if refused:
        raises_one_line(
            check, f"data.image_size={side}", f"data.batch_size={batch}", "largest item is 32"
        )
    else:
        check()


def test_counting_a_steps_memory_leaves_the_nets_own_hooks_alone():
    """The meta copy carries the net's hooks (the first-forward watch): they never run for it."""
    import torch

    from litlab.data import saved_bytes
    from litlab.runs.run_end import _Watch

    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU())
    watch = _Watch(net)
    assert saved_bytes(net, (1, 1, 16, 16)) > 0
    assert watch.shape == "?" and not watch.inside  # not run
    net(torch.zeros(1, 1, 16, 16))
    assert watch.shape == "[1, 1, 16, 16]"  # still watching the real first forward
