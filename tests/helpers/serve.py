"""Helpers of the serving tests: the exported digits model, `src/serve.py` in a subprocess,
HTTP requests (urllib) and multipart bodies, raw-socket exchanges for the hostile tests
(crafted ONNX files: tests/helpers/onnx_files.py)."""

import csv
import io
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np

from helpers.runs import ROOT

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
    """The default digits run's best checkpoint exported to ONNX, fp32 and int8 (once per
    session: the serving and eval test modules share it), and eval.py's predictions."""
    from filelock import FileLock

    from litlab.export.recipe import export_checkpoint

    base = tmp_path_factory.getbasetemp()
    logs = base / "serve_export" / "logs"
    with FileLock(base / "serve_export.lock"):
        if not (logs / "export" / "done").exists():
            report = export_checkpoint(
                digits_run.best,
                logs / "export",
                formats=["onnx", "onnx_int8"],
                latency={"batch_sizes": []},
            )
            assert report["ok"], report
            (logs / "export" / "done").touch()
    with open(digits_run.eval / "predictions.csv") as f:
        preds = [int(r["pred"]) for r in csv.DictReader(f)]
    out = logs / "export"
    return {
        "onnx": out / "model.onnx",
        "int8": out / "model.int8.onnx",
        "preds": preds,
        "logs": logs,
    }


class Drained:
    """A server's merged output, read while it is written: a pipe nobody reads holds 64 kB,
    and a server that writes more (its log, warnings) stops mid-write and answers nothing.
    `read()` returns all of it so far; after the server ended, all it wrote."""

    def __init__(self, pipe):
        self._parts: list[str] = []
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe) -> None:
        for line in pipe:
            self._parts.append(line)

    def read(self) -> str:
        self._thread.join(timeout=5)  # the rest of a server that ended
        return "".join(self._parts)


def start(
    model: Path, logs: Path, *extra: str, env: dict | None = None, root: Path = ROOT
) -> tuple[subprocess.Popen, str]:
    """`src/serve.py model_path=... extra...` (with `env` added to the environment) of the
    project at `root` (a copy: its src/ first on the path), once it answers /health."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(root / "src" / "serve.py"),
            f"model_path={model}",
            f"port={port}",
            f"paths.log_dir={logs}",
            "extras.print_config=false",
            *extra,
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            **({} if root == ROOT else {"PYTHONPATH": str(root / "src")}),
            **(env or {}),
        },
    )
    proc.stdout = Drained(proc.stdout)
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
