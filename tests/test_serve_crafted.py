"""The service on crafted ONNX files (a real 10-class model of one MatMul), in-process through
FastAPI's TestClient, one real socket for pipelining: a number that is not finite never
reaches the JSON encoder (inputs that overflow the model, OOD scores that overflow: a 422
naming the item, on every route, never a 500); images are read upright (EXIF orientation, in
every format) and a multi-frame file is refused naming its frame count, never answered for its
first frame (pipelining and half-close: test_serve_pipelining.py)."""

import io
import json
import math

import numpy as np
import pytest
from helpers.onnx_files import GOOD, OOD, crafted_model, deep
from PIL import Image

CONFIDENCE_ONLY = {"threshold": 1.0, "parts": {"confidence": {"median": 0.1, "scale": 0.5}}}
#: an asymmetric 8x8 picture: each of the 8 EXIF orientations stores it differently
PICTURE = np.zeros((8, 8), np.uint8)
PICTURE[1:3, 1:7], PICTURE[3:7, 5], PICTURE[6, 1:4] = 255, 180, 90
#: EXIF orientation -> what the camera did to the upright picture when storing it
STORED_AS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def save(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def with_orientation(orientation: int, fmt: str) -> bytes:
    """PICTURE stored as a camera stores it, with the EXIF tag that says how to show it."""
    stored = Image.fromarray(PICTURE).transpose(STORED_AS[orientation])
    if fmt == "TIFF":
        return save(stored, "TIFF", tiffinfo={0x0112: orientation})
    exif = Image.Exif()
    exif[0x0112] = orientation
    options = {"JPEG": {"quality": 100}, "WEBP": {"lossless": True}}.get(fmt, {})
    return save(stored, fmt, exif=exif, **options)


def frames(n: int, fmt: str) -> bytes:
    pages = [Image.fromarray(np.roll(PICTURE, i, axis=1)) for i in range(n)]
    if fmt in ("MPO", "WEBP"):
        pages = [p.convert("RGB") for p in pages]
    lossless = {"lossless": True} if fmt == "WEBP" else {}
    return save(pages[0], fmt, save_all=True, append_images=pages[1:], **lossless)


def tiff_without_dimensions_on_page_2() -> bytes:
    """A 2-page TIFF whose second page lacks its width tag (Pillow: TypeError on seek)."""
    import struct

    raw = bytearray(frames(2, "TIFF"))
    first = struct.unpack_from("<I", raw, 4)[0]
    second = struct.unpack_from("<I", raw, first + 2 + 12 * struct.unpack_from("<H", raw, first)[0])
    for entry in range(struct.unpack_from("<H", raw, second[0])[0]):
        at = second[0] + 2 + 12 * entry
        if struct.unpack_from("<H", raw, at)[0] == 256:  # ImageWidth -> an unknown tag
            struct.pack_into("<H", raw, at, 65000)
    return bytes(raw)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("crafted")
    weight = np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32)
    loud = weight.copy()
    loud[:, 0] = 1e37  # class 0 overflows to inf on a bright image (finite on a black one)
    return {
        "plain": crafted_model(base / "plain.onnx", {**GOOD, "ood": CONFIDENCE_ONLY}),
        "loud": crafted_model(base / "loud.onnx", {**GOOD, "ood": CONFIDENCE_ONLY}, weight=loud),
        # answers 0 for anything: only the OOD score's input parts can overflow
        "ood": crafted_model(base / "ood.onnx", {**GOOD, "ood": OOD}, weight=weight * 0),
        "indexed": value_indexed(base / "indexed.onnx"),
    }


def value_indexed(path):
    """A model that looks up its answer by the largest input value (Gather): zeros run, an
    input of 50 indexes past its 10-row table (ONNX Runtime fails on that input only)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.eye(10, dtype=np.float32), "table")
    axis = numpy_helper.from_array(np.asarray([1], np.int64), "axis")
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["x"], ["flat"]),
            helper.make_node("Cast", ["flat"], ["ints"], to=TensorProto.INT64),
            helper.make_node("ReduceMax", ["ints", "axis"], ["top"], keepdims=0),
            helper.make_node("Gather", ["table", "top"], ["logits"], axis=0),
        ],
        "indexed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [table, axis],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    helper.set_model_props(model, {k: json.dumps(v) for k, v in GOOD.items()})
    onnx.save(model, str(path))
    return path


def client(path, **settings):
    from fastapi.testclient import TestClient

    from litlab.serving.app import create_app

    return TestClient(create_app(path, **settings), raise_server_exceptions=False)


def predict_json(c, samples) -> tuple[int, dict]:
    r = c.post("/predict", json={"inputs": np.asarray(samples).tolist()})
    return r.status_code, r.json()


def upload(c, files: list[bytes]) -> tuple[int, dict]:
    r = c.post("/predict", files=[("file", (f"{i}.img", f)) for i, f in enumerate(files)])
    return r.status_code, r.json()


def assert_finite_json(status: int, out: dict) -> None:
    """A 200 with finite numbers, or a 422 of one sentence: never a 500."""
    assert status in (200, 422), (status, out)
    if status == 422:
        assert list(out) == ["error"] and "\n" not in out["error"], out
        return
    numbers = [v for row in out["probabilities"] for v in row] + out.get("ood_scores", [])
    assert all(math.isfinite(v) for v in numbers), out


def no_500(c) -> None:
    """The other routes answer as before, and no 500 was ever counted."""
    assert c.get("/health").json()["status"] == "ready"
    json.loads(c.get("/metadata").content)  # strict JSON: no NaN
    assert 'status="500"' not in c.get("/metrics").text


SAMPLE = np.zeros((1, 8, 8), np.float32)


@pytest.mark.parametrize("batching", [True, False])
def test_inputs_that_overflow_the_model_get_a_422(models, batching):
    """3e38 is a finite float32; the model's output on it is not (the issue's 500)."""
    with client(models["plain"], batching=batching, max_batch=8) as c:
        for samples, item in [
            ([SAMPLE + 3e38], 1),
            ([SAMPLE, SAMPLE - 3.4e38], 2),
            ([SAMPLE, SAMPLE, np.where(PICTURE > 0, 2e38, -2e38)[None]], 3),
        ]:
            status, out = predict_json(c, samples)
            assert status == 422, out
            assert f"output is not finite for item {item} of the request" in out["error"], out
        for scale in (1e30, 1e36, 1e37, 1e38):  # wherever the overflow starts: never a 500
            assert_finite_json(*predict_json(c, [SAMPLE + scale, SAMPLE - scale]))
        assert predict_json(c, [SAMPLE])[0] == 200
        no_500(c)


def test_images_the_model_overflows_on_get_a_422(models):
    """Upload and batch routes: a bright image overflows class 0, a black one does not."""
    white, black = (save(Image.new("L", (8, 8), v)) for v in (255, 0))
    with client(models["loud"], max_batch=8) as c:
        assert upload(c, [black])[0] == 200
        for files, item in [([white], 1), ([black, black, white], 3)]:
            status, out = upload(c, files)
            assert status == 422 and f"for item {item} of" in out["error"], out
        status, out = upload(c, [save(Image.fromarray(PICTURE))])  # finite or a 422
        assert_finite_json(status, out)
        no_500(c)


def test_ood_scores_that_overflow_get_a_422(models):
    """The model answers 0; the OOD statistics of 3e38 inputs overflow (inf - inf)."""
    with client(models["ood"]) as c:
        status, out = predict_json(c, [SAMPLE + 3e38])
        assert status == 422 and "out-of-distribution score is not finite" in out["error"]
        status, out = predict_json(c, [SAMPLE, SAMPLE + 1.5])
        assert status == 200 and all(math.isfinite(s) for s in out["ood_scores"]), out
        no_500(c)


def nifti(values: np.ndarray) -> bytes:
    import gzip

    import nibabel as nib

    return gzip.compress(nib.Nifti1Image(values.astype(np.float32), np.eye(4)).to_bytes())


OVERFLOWING_VOLUMES = [
    np.full((4, 4, 4), 3e38),
    np.random.default_rng(0).choice([-3e38, 3e38], (4, 4, 4)),
]


@pytest.mark.slow  # the first volume read imports MONAI's transforms: 10-60 s on 2 busy cores
def test_volumes_whose_z_score_overflows_get_a_422(tmp_path):
    """NIfTI route: a volume of finite float32 values too large to z-score (its mean and std
    overflow) is a 422 saying so, before the model sees NaN; a plain one is answered."""
    volume_meta = deep(
        {"kind": "volume_classification", "inputs": {"x": {"shape": ["batch", 1, 4, 4, 4]}}}
    )
    path = crafted_model(tmp_path / "v.onnx", volume_meta, x_shape=("batch", 1, 4, 4, 4))

    rng = np.random.default_rng(0)
    with client(path) as c:
        r = c.post("/predict", files={"file": ("v.nii.gz", nifti(rng.normal(size=(4, 4, 4))))})
        assert r.status_code == 200, r.json()
        for values in OVERFLOWING_VOLUMES:
            r = c.post("/predict", files={"file": ("v.nii.gz", nifti(values))})
            assert r.status_code == 422 and "too large to normalize" in r.json()["error"]
        no_500(c)


@pytest.mark.parametrize("batching", [True, False])
def test_an_input_the_model_cannot_run_on_gets_a_422(models, batching):
    """ONNX Runtime fails on this input only (the model ran on zeros at start): a 422 for the
    request, and the next request is answered."""
    with client(models["indexed"], batching=batching) as c:
        status, out = predict_json(c, [SAMPLE, SAMPLE + 50])
        assert status == 422 and "cannot run on this input" in out["error"], out
        assert predict_json(c, [SAMPLE + 3])[1]["class_ids"] == [3]
        no_500(c)


@pytest.mark.parametrize("fmt", ["PNG", "TIFF", "JPEG", "WEBP"])
def test_exif_orientation_is_applied(models, fmt):
    """A picture stored rotated or mirrored with its EXIF orientation is classified upright:
    the upright picture's probabilities in every orientation (lossless formats: equal)."""
    with client(models["plain"]) as c:
        upright = upload(c, [save(Image.fromarray(PICTURE), fmt, quality=100, lossless=True)])[1]
        for orientation, transpose in STORED_AS.items():
            status, out = upload(c, [with_orientation(orientation, fmt)])
            assert status == 200, out
            atol = 0.05 if fmt == "JPEG" else 1e-5
            got, want = np.asarray(out["probabilities"]), np.asarray(upright["probabilities"])
            assert np.allclose(got, want, atol=atol), (orientation, got, want)
            stored = Image.fromarray(PICTURE).transpose(transpose)  # what ignoring the tag sees
            as_stored = np.asarray(upload(c, [save(stored)])[1]["probabilities"])
            assert not np.allclose(as_stored, want, atol=atol), orientation


@pytest.mark.parametrize(
    "pages,words",  # (frames, format) of each file: built by the test, not at collection
    [
        ([(100, "TIFF")], "has 100 frames"),
        ([(2, "TIFF")], "has 2 frames"),
        ([(3, "PNG")], "has 3 frames"),  # APNG
        ([(1, "PNG"), (5, "TIFF")], "has 5 frames"),
        ([(1200, "TIFF")], "has more than 1000 frames"),
        ([(4, "GIF")], "has 4 frames"),
        ([(6, "WEBP")], "has 6 frames"),
    ],
    ids=["100-page TIFF", "2-page TIFF", "APNG", "one of a batch", "1200 pages", "GIF", "WebP"],
)
def test_multi_frame_images_are_refused_with_their_frame_count(models, pages, words):
    files = [frames(n, fmt) if n > 1 else save(Image.fromarray(PICTURE)) for n, fmt in pages]
    with client(models["plain"], max_batch=8) as c:
        status, out = upload(c, files)
        assert status == 422 and words in out["error"] and "one image per file" in out["error"]


def test_single_frame_gif_and_webp_are_read_like_the_png(models):
    with client(models["plain"]) as c:
        png = upload(c, [save(Image.fromarray(PICTURE))])[1]["probabilities"]
        for raw in (frames(1, "GIF"), frames(1, "WEBP")):
            status, out = upload(c, [raw])
            assert status == 200 and np.allclose(out["probabilities"], png, atol=1e-5), out


def test_a_page_pillow_cannot_read_is_a_415(models):
    """Pillow raises TypeError, not OSError, for a TIFF page without dimensions: still a 415
    (the hostile fuzz found it), as is any other parse error of an upload."""
    with client(models["plain"]) as c:
        status, out = upload(c, [tiff_without_dimensions_on_page_2()])
        assert status == 415 and "truncated or corrupt" in out["error"], out
        no_500(c)


def test_an_mpo_is_its_primary_picture(models):
    """A camera's MPO (a JPEG with extra pictures: previews, depth or gain maps) is frame 0."""
    with client(models["plain"]) as c:
        status, out = upload(c, [frames(2, "MPO")])
        first = save(Image.fromarray(PICTURE).convert("RGB"), "JPEG")
        assert status == 200 and out["probabilities"] == upload(c, [first])[1]["probabilities"]
