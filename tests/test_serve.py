"""The inference service as a user runs it: `src/serve.py` in a subprocess on a free port, over
real HTTP. Uploaded images get eval.py's predictions; bad requests get one-sentence 4xx errors
and never break the worker; SIGTERM drains and exits 0 with nothing left behind."""

import csv
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers.runs import ROOT, run_cli, run_dirs

# one worker runs this module (and the other users of digits_run), so its module-scoped
# fixtures are built once and no worker waits for digits_run (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("digits_run")

START_TIMEOUT = 180  # seconds: importing torch and warming up on a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(
    url, body: bytes | None = None, content_type: str | None = None, headers: dict | None = None
) -> tuple[int, dict | bytes]:
    req = urllib.request.Request(
        url,
        data=body,
        method="POST" if body is not None else "GET",
        headers={**({"Content-Type": content_type} if content_type else {}), **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, raw, kind = r.status, r.read(), r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        status, raw, kind = e.code, e.read(), e.headers.get("content-type", "")
    return status, json.loads(raw) if "json" in kind else raw


def multipart(files: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = "litlabboundary7MA4YWxk"
    parts = [
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        + data
        + b"\r\n"
        for name, data in files
    ]
    return b"".join(
        parts
    ) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def digits(digits_run, tmp_path_factory):
    """The default digits run's best checkpoint exported to ONNX, and eval.py's predictions."""
    from litlab.export.recipe import export_checkpoint

    logs = tmp_path_factory.mktemp("serve") / "logs"
    with open(digits_run.eval / "predictions.csv") as f:
        preds = [int(r["pred"]) for r in csv.DictReader(f)]
    report = export_checkpoint(
        digits_run.best, logs / "export", formats=["onnx"], latency={"batch_sizes": []}
    )
    assert report["ok"], report
    return {"onnx": logs / "export" / "model.onnx", "preds": preds, "logs": logs}


def start(model: Path, logs: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "src" / "serve.py"),
            f"model_path={model}",
            f"port={port}",
            f"paths.log_dir={logs}",
            "extras.print_config=false",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url, deadline = f"http://127.0.0.1:{port}", time.time() + START_TIMEOUT
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve.py exited {proc.returncode}: {proc.stdout.read()}")
        try:
            if request(url + "/health")[0] == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("serve.py did not become ready")


@pytest.fixture(scope="module")
def server(digits):
    proc, url = start(digits["onnx"], digits["logs"], "max_batch=4", "max_body_bytes=65536")
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def test_uploaded_images_get_eval_predictions(server, digits):
    """The service preprocesses a PNG exactly as training did: each test image gets the class
    eval.py listed for it (test split order = predictions.csv order)."""
    from litlab.data.vision import DigitsDataModule

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
    assert meta["task"] == "image_classification" and meta["inputs"]["x"]["layout"] == "NCHW"
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
    (b"x" * 70000, "application/json", 413, "larger than the limit"),
    (b"hello", "text/plain", 415, "content type"),
    (multipart([("a.png", b"this is not an image")]), None, 415, "PNG or JPEG"),
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


def test_good_request_after_200_bad_ones(server, digits):
    for i in range(200):
        body, kind, status, _ = BAD[i % len(BAD)]
        if isinstance(body, tuple):
            body, kind = body
        assert request(server + "/predict", body, kind)[0] == status
    from litlab.data.vision import DigitsDataModule

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
    from litlab.recipes.load import load_run
    from litlab.serving.app import create_app

    extra = [f"paths.data_dir={shared_data('TUDataset').parent}"] if domain == "gin" else []
    run_cli("train.py", *SERVE_DOMAINS[domain], *extra, "test=false", log_dir=tmp_path / "logs")
    ckpt = run_dirs(tmp_path / "logs")[-1] / "checkpoints" / "last.ckpt"
    assert export_checkpoint(
        ckpt, tmp_path / "export", formats=["onnx"], latency={"batch_sizes": []}
    )["ok"]
    run = load_run(ckpt)
    net = run.model.net.eval()
    app = create_app(tmp_path / "export" / "model.onnx", max_batch=8, max_body_bytes=1 << 22)
    with TestClient(app) as client:
        assert client.get("/health").json()["status"] == "ready"
        if domain == "unet3d":
            volume = np.random.default_rng(0).normal(size=(20, 26, 30)).astype(np.float32)
            raw = gzip.compress(nib.Nifti1Image(volume, np.eye(4)).to_bytes())
            r = client.post("/predict", files={"file": ("case.nii.gz", raw)})
            assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
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
        bad = {**body, "edge_index": [[0], [len(data.x)]]}
        assert client.post("/predict", json=bad).status_code == 422
        assert client.post("/predict", json={"x": [[1.0]], "edge_index": []}).status_code == 422
