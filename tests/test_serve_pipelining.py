"""HTTP pipelining against the service as uvicorn runs it with litlab's protocol
(litlab.serving.server), over a real socket on 127.0.0.1: every request received in full
before the client's half-close is answered, in order, and the connection then closes."""

import json
import socket
import threading
import time

import numpy as np
import pytest
from helpers.onnx_files import GOOD, crafted_model
from helpers.serve import free_port, parse

SAMPLE = np.zeros((1, 8, 8), np.float32)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The app of a crafted model under uvicorn with litlab's protocol, in a thread, on
    127.0.0.1."""
    import uvicorn

    from litlab.config.after_training import ServeSettings
    from litlab.serving.app import create_app
    from litlab.serving.server import uvicorn_config

    path = crafted_model(tmp_path_factory.mktemp("pipelining") / "model.onnx", GOOD)
    settings = ServeSettings(port=free_port(), keep_alive_s=5)
    server = uvicorn.Server(uvicorn_config(create_app(path, settings), settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    yield settings.port
    server.should_exit = True
    thread.join(30)


def half_closed(port: int, data: bytes) -> tuple[list[int], float]:
    """Send `data`, half-close, read until the server closes: the statuses and the seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        start = time.perf_counter()
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
        seconds = time.perf_counter() - start
    statuses = []
    while raw:  # answers one after the other: head, then content-length bytes of body
        head, _, rest = raw.partition(b"\r\n\r\n")
        status, headers, _ = parse(head)
        statuses.append(status)
        raw = rest[int(headers["content-length"]) :]
    return statuses, seconds


def _post(body: bytes) -> bytes:
    return (
        "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _chunked(body: bytes) -> bytes:
    return (
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n"
    )


HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
PREDICT = _post(json.dumps({"inputs": [SAMPLE.tolist()]}).encode())
PIPELINES = {  # data sent before the half-close: the statuses it must get
    "3 health": (HEALTH * 3, [200] * 3),
    "3 predict": (PREDICT * 3, [200] * 3),
    "mixed, a 422 inside": (
        HEALTH
        + _post(b'{"inputs": [[1, 2]]}')
        + PREDICT
        + b"GET /metadata HTTP/1.1\r\nHost: x\r\n\r\n",
        [200, 422, 200, 200],
    ),
    "20 predict": (PREDICT * 20, [200] * 20),
    "chunked bodies": (_chunked(json.dumps({"inputs": [SAMPLE.tolist()]}).encode()) * 3, [200] * 3),
    "3 and half a head": (HEALTH * 3 + b"GET /hea", [200] * 3),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_pipelined_requests_before_a_half_close_are_all_answered(live, name):
    """Each request received in full before the client's half-close gets its answer, in
    order, then the server closes at once (not after keep_alive_s)."""
    data, expected = PIPELINES[name]
    statuses, seconds = half_closed(live, data)
    assert statuses == expected, statuses
    assert seconds < 3, seconds
