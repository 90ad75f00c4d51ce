"""The inference service as a user runs it: `src/serve.py` in a subprocess on a free port, over
real HTTP. Uploaded images get eval.py's predictions; bad requests get one-sentence 4xx errors
and never break the worker; SIGTERM drains and exits 0 with nothing left behind."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers.image_modes import check_modes, far_from_digits, mode_accuracy
from helpers.runs import ROOT, run_cli, run_dirs
from helpers.serve import export_digits, multipart, png, request, start

# one worker runs this module (and the other users of digits_run), so its module-scoped
# fixtures are built once and no worker waits for digits_run (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("digits_run")

BODY = 400_000  # the body limit of the module's server (a 640x480 noise PNG fits)


@pytest.fixture(scope="module")
def digits(digits_run, tmp_path_factory):
    return export_digits(digits_run, tmp_path_factory)


@pytest.fixture(scope="module")
def server(digits):
    proc, url = start(digits["onnx"], digits["logs"], "max_batch=4", f"max_body_bytes={BODY}")
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def test_uploaded_images_get_eval_predictions(server, digits):
    """The service preprocesses a PNG exactly as training did: each test image gets the class
    eval.py listed for it (test split order = predictions.csv order)."""
    from litlab.domains.vision.data import DigitsDataModule

    dm = DigitsDataModule()
    dm.setup()
    images = (dm.test_set.images[:40, 0].numpy() * 255).round().astype(np.uint8)
    for start_ in range(0, 40, 4):
        body, kind = multipart([(f"{i}.png", png(images[i])) for i in range(start_, start_ + 4)])
        status, out = request(server + "/predict", body, kind)
        assert status == 200, out
        assert out["class_ids"] == digits["preds"][start_ : start_ + 4]
        assert len(out["request_id"]) == 32 and out["classes"] == [str(i) for i in range(10)]
        assert np.allclose(np.sum(out["probabilities"], 1), 1, atol=1e-4)


def test_health_metadata_metrics(server):
    assert request(server + "/health") == (200, {"status": "ready", "model": "model.onnx"})
    meta = request(server + "/metadata")[1]
    assert meta["kind"] == "image_classification" and meta["inputs"]["x"]["layout"] == "NCHW"
    assert meta["inputs"]["background"] == [0.0]  # digits: white ink on black
    assert meta["ood"]["test_exceed_fraction"] <= 0.05 and meta["ood"]["test_count"] == 360
    metrics = request(server + "/metrics")[1].decode()
    assert 'litlab_requests_total{path="/health",status="200"}' in metrics
    assert "litlab_request_seconds_bucket" in metrics
    assert request(server + "/docs")[0] == 200


SAMPLE = np.zeros((1, 8, 8)).tolist()
BAD = [  # (body, content type, status, words of the error)
    (json.dumps({"inputs": [[1, 2]]}).encode(), "application/json", 422, "dimensions"),
    (
        json.dumps({"inputs": [np.zeros((1, 7, 8)).tolist()]}).encode(),
        "application/json",
        422,
        "shape",
    ),
    (json.dumps({"inputs": [[[["a"] * 8] * 8]]}).encode(), "application/json", 422, "numbers"),
    (json.dumps({"inputs": [SAMPLE] * 5}).encode(), "application/json", 413, "limit is 4"),
    (json.dumps({"inputs": []}).encode(), "application/json", 422, "no items"),
    (json.dumps({"x": 1}).encode(), "application/json", 422, "'inputs'"),
    (b"", "application/json", 400, "empty"),
    (b"{not json", "application/json", 400, "not valid JSON"),
    (b"x" * (BODY + 1), "application/json", 413, "larger than the limit"),
    (b"hello", "text/plain", 415, "content type"),
    (multipart([("a.png", b"this is not an image")]), None, 415, "PNG, JPEG, TIFF"),
    (multipart([("a.png", b"")]), None, 400, "empty"),
    (multipart([(f"{i}.png", b"x") for i in range(5)]), None, 413, "limit is 4"),
    (b"--nope\r\n\r\nbroken", "multipart/form-data; boundary=nope", 400, None),
]


@pytest.mark.parametrize("body,kind,status,words", BAD, ids=range(len(BAD)))
def test_bad_requests_get_one_sentence_4xx(server, body, kind, status, words):
    if isinstance(body, tuple):
        body, kind = body
    got, out = request(server + "/predict", body, kind)
    assert got == status, out
    assert list(out) == ["error"] and out["error"].endswith(".") and "\n" not in out["error"]
    assert words is None or words in out["error"]


def test_every_image_mode_is_classified_as_the_8bit_png(server):
    """Transparent canvases in either ink colour, palettes with transparency, 16-bit, float,
    CMYK, JPEG and larger images of the same digits get the 8-bit PNG's answers over HTTP."""
    check_modes(mode_accuracy(server, 60))


@pytest.mark.slow
def test_every_image_mode_on_the_whole_test_split(server):
    results = mode_accuracy(server, None)
    for name, (acc, flagged, _) in results.items():
        print(f"{name:30s} accuracy {acc:.4f}  flagged out-of-distribution {flagged:.3f}")
    check_modes(results)


def test_noise_and_blank_images_are_flagged(server):
    for name, raw in far_from_digits().items():
        body, kind = multipart([(f"{name}.png", raw)])
        status, out = request(server + "/predict", body, kind)
        assert status == 200 and out["out_of_distribution"] == [True], (name, out)
        threshold = request(server + "/metadata")[1]["ood"]["threshold"]
        assert out["ood_scores"][0] > threshold


def test_good_request_after_200_bad_ones(server, digits):
    for i in range(200):
        body, kind, status, _ = BAD[i % len(BAD)]
        if isinstance(body, tuple):
            body, kind = body
        assert request(server + "/predict", body, kind)[0] == status
    from litlab.domains.vision.data import DigitsDataModule

    dm = DigitsDataModule()
    dm.setup()
    x, _ = dm.on_after_batch_transfer((dm.test_set.images[:3], dm.test_set.labels[:3]), 0)
    status, out = request(
        server + "/predict", json.dumps({"inputs": x.tolist()}).encode(), "application/json"
    )
    assert status == 200 and out["class_ids"] == digits["preds"][:3]
    metrics = request(server + "/metrics")[1].decode()
    assert 'litlab_requests_total{path="/predict",status="413"}' in metrics  # body limit too


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_signal_drains_and_exits_zero(digits, sig):
    proc, url = start(digits["onnx"], digits["logs"])
    port = int(url.rsplit(":", 1)[1])
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 0, proc.stdout.read()
    assert "stopped" in proc.stdout.read()
    with socket.socket() as s:  # nothing listens on the port: a new server can bind it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        s.bind(("127.0.0.1", port))


def test_an_image_model_is_served_without_importing_torch(digits):
    """ONNX Runtime answers; torch's import (about a second of serve.py's start) is left to
    what needs it (a volume's sliding window, a checkpoint exported first)."""
    code = (
        "import sys; from litlab.serving import server; from litlab.serving.app import create_app;"
        "create_app(sys.argv[1]); print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(digits["onnx"])],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


SERVE_DOMAINS = {
    "unet3d": [
        "model=unet3d",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "data.num_volumes=12",
    ],
    "gcn": ["model=gnn", "trainer.max_epochs=3"],
    "gin": ["model=gin", "data=mutag", "trainer.max_epochs=1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("domain", list(SERVE_DOMAINS))
def test_volume_and_graph_requests(domain, tmp_path, shared_data):
    """NIfTI in, NIfTI mask out (3D); JSON graphs in, per-node/per-graph classes out; the
    eager net's classes; malformed volumes and graphs get 4xx (in-process app, same code)."""
    import gzip

    import nibabel as nib
    import torch
    from fastapi.testclient import TestClient

    from litlab.export.recipe import export_checkpoint
    from litlab.runs.rebuild import load_run
    from litlab.serving.app import create_app

    data = shared_data("TUDataset").parent if domain == "gin" else None  # else generated
    extra = [f"paths.data_dir={data}"] if data else []
    run_cli("train.py", *SERVE_DOMAINS[domain], *extra, "test=false", log_dir=tmp_path / "logs")
    ckpt = run_dirs(tmp_path / "logs")[-1] / "checkpoints" / "last.ckpt"
    assert export_checkpoint(
        ckpt, tmp_path / "export", data_dir=data, formats=["onnx"], latency={"batch_sizes": []}
    )["ok"]
    run = load_run(ckpt, data_dir=data)
    net = run.model.net.eval()
    app = create_app(tmp_path / "export" / "model.onnx", max_batch=8, max_body_bytes=1 << 22)
    with TestClient(app) as client:
        assert client.get("/health").json()["status"] == "ready"
        if domain == "unet3d":
            volume = np.random.default_rng(0).normal(size=(20, 26, 30)).astype(np.float32)
            raw = gzip.compress(nib.Nifti1Image(volume, np.eye(4)).to_bytes())
            timings = []
            for _ in range(3):  # warmed up at start: the first is as fast as the next
                start_ = time.perf_counter()
                r = client.post("/predict", files={"file": ("case.nii.gz", raw)})
                timings.append(time.perf_counter() - start_)
            assert timings[0] < 2 * max(timings[1:]) + 0.3, timings  # cold: 3.9 s vs 0.14 s
            assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
            assert r.headers["x-out-of-distribution"] in ("true", "false")
            mask = nib.Nifti1Image.from_bytes(gzip.decompress(r.content)).get_fdata()
            assert mask.shape == volume.shape and set(np.unique(mask)) <= {0, 1, 2}
            r = client.post("/predict", files={"file": ("case.nii.gz", raw[: len(raw) // 2])})
            assert r.status_code == 400 and "NIfTI" in r.json()["error"]
            return
        data = (
            run.datamodule.data
            if domain == "gcn"
            else next(iter(run.datamodule.loader(run.datamodule.dataset[:2], train=False)))
        )
        body = {"x": data.x.tolist(), "edge_index": data.edge_index.tolist()}
        args = [data.x, data.edge_index]
        if domain == "gin":
            body["batch"] = data.batch.tolist()
            args.append(data.batch)
        r = client.post("/predict", json=body)
        assert r.status_code == 200, r.json()
        with torch.no_grad():
            assert r.json()["class_ids"] == net(*args).argmax(1).tolist()
        assert len(r.json()["ood_scores"]) == len(r.json()["class_ids"])
        bad = {**body, "edge_index": [[0], [len(data.x)]]}
        assert client.post("/predict", json=bad).status_code == 422
        assert client.post("/predict", json={"x": [[1.0]], "edge_index": []}).status_code == 422
