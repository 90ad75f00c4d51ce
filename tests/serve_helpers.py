"""Helpers of the serving tests: the exported digits model, crafted ONNX files (a real
10-class model of one MatMul under any metadata, dtypes, ranks and weights), `src/serve.py` in a
subprocess, HTTP requests (urllib) and multipart bodies, raw-socket exchanges for the hostile
tests."""

import csv
import io
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np
from conftest import ROOT

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


def export_digits(digits_run, tmp_path_factory) -> dict:
    """The default digits run's best checkpoint exported to ONNX (once per session: the
    serving test modules share it), and eval.py's predictions."""
    from filelock import FileLock

    from litlab.export.recipe import export_checkpoint

    base = tmp_path_factory.getbasetemp()
    logs = base / "serve_export" / "logs"
    with FileLock(base / "serve_export.lock"):
        if not (logs / "export" / "done").exists():
            report = export_checkpoint(
                digits_run.best, logs / "export", formats=["onnx"], latency={"batch_sizes": []}
            )
            assert report["ok"], report
            (logs / "export" / "done").touch()
    with open(digits_run.eval / "predictions.csv") as f:
        preds = [int(r["pred"]) for r in csv.DictReader(f)]
    return {"onnx": logs / "export" / "model.onnx", "preds": preds, "logs": logs}


def start(
    model: Path, logs: Path, *extra: str, env: dict | None = None
) -> tuple[subprocess.Popen, str]:
    """`src/serve.py model_path=... extra...` (with `env` added to the environment), once it
    answers /health."""
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
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
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


def exchange(port: int, data: bytes, wait: float = 10.0, pause: float = 0.0) -> bytes:
    """Send raw bytes (one byte every `pause` s if given), read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        try:
            if pause:
                for b in data:
                    s.sendall(bytes([b]))
                    time.sleep(pause)
            else:
                s.sendall(data)
        except OSError:
            pass  # the server may answer and close before everything is sent
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def parse(raw: bytes) -> tuple[int, dict, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


def png_bomb(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height 1-bit pixels: a few hundred bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1000)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def big_png(side: int, seed: int = 0) -> bytes:
    """A legal, large, well-compressed RGBA image (slow to decode, small to send)."""
    from PIL import Image

    ramp = np.linspace(0, 255, side, dtype=np.uint8)
    rgba = np.dstack([np.add.outer(ramp, ramp // 2 + seed)] * 3 + [np.add.outer(ramp, ramp)])
    buf = io.BytesIO()
    Image.fromarray(rgba.astype(np.uint8), "RGBA").save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def post(port: int, body: bytes, kind: str, extra: str = "") -> bytes:
    head = (
        f"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode() + body


GOOD = {  # the litlab metadata of an 8x8 grey image classifier with 10 classes
    "task": "image_classification",
    "classes": [str(i) for i in range(10)],
    "input_names": ["x"],
    "inputs": {
        "x": {
            "shape": ["batch", 1, 8, 8],
            "dtype": "float32",
            "layout": "NCHW",
            "normalization": {"mean": [0.3], "std": [0.4]},
        },
        "image_size": 8,
        "channels": 1,
        "background": [0.0],
    },
}

OOD = {  # a complete OOD entry of an 8x8 grey classifier: 64 summary dims, 2 statistics
    "threshold": 1.0,
    "test_count": 360,
    "test_exceed_fraction": 0.05,
    "parts": {k: {"median": 0.0, "scale": 1.0} for k in ("confidence", "input", "statistics")},
    "model": {
        "input": {
            "mean": [0.0] * 64,
            "components": [[1.0] + [0.0] * 63, [0.0, 1.0] + [0.0] * 62],
            "variances": [1.0, 0.5],
            "residual_variance": 0.1,
        },
        "statistics": {"mean": [0.0, 1.0], "precision": [[1.0, 0.0], [0.0, 1.0]]},
    },
}


def deep(update: dict, base: dict = GOOD) -> dict:
    """A copy of `base` with dotted keys set (`{"inputs.x.normalization.std": [0]}`)."""
    out = json.loads(json.dumps(base))
    for key, value in update.items():
        *parents, last = key.split(".")
        target = out
        for p in parents:
            target = target[p]
        target[last] = value
    return out


def crafted_model(
    path,
    props: dict | None,
    outputs: int = 10,
    weight: np.ndarray | None = None,
    bias: np.ndarray | list | None = None,
    constant_bias: bool = False,
    x_type: str = "FLOAT",
    x_shape: tuple = ("batch", 1, 8, 8),
    out_type: str = "FLOAT",
    out_rank: int = 2,
    batch_mean: bool = False,
    floor: float | None = None,
):
    """x -> (Cast) -> Flatten -> MatMul (+ bias) -> (Cast) -> logits [batch, outputs(, 1...)],
    with `props` as metadata (a str value is stored as is: raw JSON text). `x_type`/`out_type`
    name ONNX element types; `bias` may be a list (one Add each); `constant_bias` stores the
    biases in Constant nodes; `batch_mean` answers one row for the whole batch; `floor` is a
    Max with a constant (-inf: a sentinel, as exported masks hold)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    features = int(np.prod([s for s in x_shape[1:]]))
    if weight is None:
        weight = np.random.default_rng(0).normal(size=(features, outputs)).astype(np.float32)
    inits, nodes, flat = [numpy_helper.from_array(weight, "w")], [], "x"
    if x_type != "FLOAT":
        nodes.append(helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT))
        flat = "xf"
    nodes += [
        helper.make_node("Flatten", [flat], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["z"]),
    ]
    last = "z"
    for i, b in enumerate([] if bias is None else bias if isinstance(bias, list) else [bias]):
        tensor = numpy_helper.from_array(np.asarray(b, np.float32), f"b{i}")
        if constant_bias:
            nodes.append(helper.make_node("Constant", [], [f"b{i}"], value=tensor))
        else:
            inits.append(tensor)
        nodes.append(helper.make_node("Add", [last, f"b{i}"], [f"z{i}"]))
        last = f"z{i}"
    if floor is not None:
        value = numpy_helper.from_array(np.asarray(floor, np.float32), "floor")
        nodes.append(helper.make_node("Constant", [], ["floor"], value=value))
        nodes.append(helper.make_node("Max", [last, "floor"], ["zf"]))
        last = "zf"
    if batch_mean:
        inits.append(numpy_helper.from_array(np.asarray([0], np.int64), "batch_axis"))
        nodes.append(helper.make_node("ReduceMean", [last, "batch_axis"], ["zm"], keepdims=1))
        last = "zm"
    if out_rank != 2:
        axes = numpy_helper.from_array(np.arange(2, out_rank, dtype=np.int64), "axes")
        inits.append(axes)
        nodes.append(helper.make_node("Unsqueeze", [last, "axes"], ["zu"]))
        last = "zu"
    nodes.append(helper.make_node("Cast", [last], ["logits"], to=getattr(TensorProto, out_type)))
    out_shape = ["batch", outputs, *[1] * (out_rank - 2)]
    graph = helper.make_graph(
        nodes,
        "crafted",
        [helper.make_tensor_value_info("x", getattr(TensorProto, x_type), list(x_shape))],
        [helper.make_tensor_value_info("logits", getattr(TensorProto, out_type), out_shape)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    if props is not None:
        helper.set_model_props(
            m, {k: v if isinstance(v, str) else json.dumps(v) for k, v in props.items()}
        )
    onnx.save(m, str(path))
    return path
