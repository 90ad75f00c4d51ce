"""Hostile requests and clients against `src/serve.py` over real sockets: every one gets a 4xx
(or 503 with Retry-After) in the API's JSON shape, never a 500; bombs are refused from their
headers; slow and idle clients are closed by the timeouts; /health answers while large images
decode; SIGTERM answers every request already accepted."""

import json
import random
import signal
import socket
import threading
import time

import numpy as np
import pytest
from helpers.serve import (
    big_png,
    exchange,
    export_digits,
    multipart,
    parse,
    png_bomb,
    post,
    request,
    start,
)

pytestmark = pytest.mark.xdist_group("digits_run")

LIMITS = [
    "keep_alive_s=1",
    "request_read_timeout_s=2",
    "max_connections=40",
    "max_header_bytes=8192",
    "max_batch=8",
]


@pytest.fixture(scope="module")
def digits(digits_run, tmp_path_factory):
    return export_digits(digits_run, tmp_path_factory)


@pytest.fixture(scope="module")
def guarded(digits):
    proc, url = start(digits["onnx"], digits["logs"], *LIMITS)
    yield proc, url, int(url.rsplit(":", 1)[1])
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


JSON_HOSTILE = {  # body: words of the 422/413 error
    b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}": "nested",
    b'{"inputs": [' + b"1" * 400 + b"]}": "numbers",
    b'{"inputs": [[[[1e308]]]]}': "float32",
    b'{"inputs": [[[[3e38, -3.5e38]]]]}': "float32",
    b'{"inputs": [[[[1e999999]]]]}': "NaN or infinite",
    b'{"inputs": [[[[NaN]]]]}': "finite numbers",
    b'{"inputs": [[[["0.5"]]]]}': "numbers",
    b'{"inputs": [[[[true]]]]}': "true, false or null",
    b'{"inputs": [[[[1.0, false]]]]}': "true, false or null",
    b'{"inputs": [[[[null]]]]}': "true, false or null",
    b'{"inputs": [[[[{"a": 1}]]]]}': "numbers",
    b'{"inputs": "[[[[0]]]]"}': "JSON array",
    b'{"in\\"puts": 1, "inputs": [[[[0]]]]}': "shape",
}


@pytest.mark.parametrize("body", list(JSON_HOSTILE), ids=range(len(JSON_HOSTILE)))
def test_hostile_json_gets_a_json_4xx(guarded, body):
    status, _, out = parse(exchange(guarded[2], post(guarded[2], body, "application/json")))
    assert status in (413, 422), out
    assert JSON_HOSTILE[body] in out["error"], out


def test_headers_over_the_limit_get_431(guarded):
    headers = "".join(f"X-Pad-{i}: {'v' * 200}\r\n" for i in range(100))  # 20 kB
    raw = exchange(guarded[2], f"GET /health HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    status, _, out = parse(raw)
    assert status == 431 and "8192" in out["error"]


def test_malformed_http_gets_the_json_error_shape(guarded):
    for junk in (
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64,
        b"GET / HTTP/9.9\r\n\r\n",
    ):
        status, headers, out = parse(exchange(guarded[2], junk))
        assert status == 400 and headers["content-type"] == "application/json", out
        assert "not valid HTTP" in out["error"]


def test_idle_connection_is_closed(guarded):
    start_ = time.perf_counter()
    assert exchange(guarded[2], b"", wait=10) == b""  # closed by the server, nothing said
    assert time.perf_counter() - start_ < 4  # keep_alive_s=1


def test_slow_headers_and_short_bodies_get_408(guarded):
    port, start_ = guarded[2], time.perf_counter()
    slow = exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 100, pause=0.2)
    short = post(port, b'{"inputs": [[[[0]]]]}', "application/json").replace(
        b"Content-Length: 21", b"Content-Length: 900"
    )
    for raw in (slow, exchange(port, short)):
        status, _, out = parse(raw)
        assert status == 408 and "request_read_timeout_s" in out["error"], out
    assert time.perf_counter() - start_ < 12


def test_connections_over_the_limit_get_503_and_close(guarded):
    port = guarded[2]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
    try:
        time.sleep(0.3)
        answers = []
        for s in held[40:]:
            s.settimeout(3)
            try:
                answers.append(s.recv(4096))
            except TimeoutError:
                answers.append(b"")
        refused = [parse(a) for a in answers if a]
        assert len(refused) >= 19, len(refused)
        assert all(st == 503 and h["retry-after"] == "1" for st, h, _ in refused)
    finally:
        for s in held:
            s.close()
    time.sleep(0.5)
    assert request(guarded[1] + "/health")[0] == 200


def test_bombs_are_refused_from_the_header(guarded):
    """1 x 170,000,000 and 13,000 x 13,000 claims: 413 at once, nothing decoded."""
    url = guarded[1]
    for bomb in (png_bomb(1, 170_000_000), png_bomb(13_000, 13_000)):
        start_ = time.perf_counter()
        body, kind = multipart([("bomb.png", bomb)] * 8)
        status, out = request(url + "/predict", body, kind)
        assert status == 413 and "max_image_pixels" in out["error"], out
        assert time.perf_counter() - start_ < 2


def test_health_answers_while_large_images_decode(guarded):
    url, big = guarded[1], big_png(4000)
    body, kind = multipart([("big.png", big)] * 4)  # 64 M pixels: the request's limit
    results, waits = [], []
    threads = [
        threading.Thread(target=lambda: results.append(request(url + "/predict", body, kind)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    time.sleep(0.2)
    while any(t.is_alive() for t in threads):
        start_ = time.perf_counter()
        assert request(url + "/health")[0] == 200
        waits.append(time.perf_counter() - start_)
        time.sleep(0.02)
    assert [s for s, _ in results] == [200, 200], results
    # decoding on the event loop held /health for the whole decode (seconds); on this shared
    # 2-core machine a single poll can wait for a core: the typical poll and the worst bound
    assert np.median(waits) < 0.1 and max(waits) < 1.0, waits


def _sigterm_during(digits, clients: int, images: int, *settings: str) -> list:
    """`clients` requests of `images` large PNGs each sent to a server started with
    `settings`, SIGTERM once all are accepted and decoding: the raw answers (the server exits
    0)."""
    proc, url = start(digits["onnx"], digits["logs"], *settings)
    port = int(url.rsplit(":", 1)[1])
    files, kind = multipart([("big.png", big_png(3000, seed=i)) for i in range(images)])
    raw = post(port, files, kind)
    answers = [None] * clients

    def client(i):
        answers[i] = exchange(port, raw, wait=120)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # all sent and accepted; decoding in the pool
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(timeout=150)
    assert proc.wait(timeout=60) == 0
    return answers


def test_sigterm_answers_every_accepted_large_request(digits):
    # a drain long enough for 8 large decodes on a loaded 2-core machine (what one that runs
    # out says instead: the test below)
    answers = _sigterm_during(digits, 8, 2, "drain_timeout_s=600")
    statuses = [parse(a)[0] if a else None for a in answers]
    assert statuses == [200] * 8, statuses


def test_requests_a_drain_cannot_finish_get_a_json_503_not_a_500(digits):
    """SIGTERM with large requests in flight and a drain of 0.1 s (its least): uvicorn cancels
    what is left, which would be its plain-text 500; each is a JSON 503 that says why, or a
    200. (With 0.5 s, a quiet 2-core machine decoded all 12 images in time and nothing was cut:
    the check passed only beside other work.)"""
    answers = _sigterm_during(digits, 4, 3, "drain_timeout_s=0.1", "threads=1")
    statuses = [int(a.split()[1]) if a else None for a in answers]  # a 500 is plain text
    assert set(statuses) <= {200, 503}, answers
    stopped = [parse(a)[2] for a, status in zip(answers, statuses, strict=True) if status == 503]
    assert stopped, f"every request finished within 0.1 s: nothing was cut ({statuses})"
    for body in stopped:
        assert body["error"].startswith(
            "The server stopped before this request was answered within drain_timeout_s=0.1 s"
        ), body


def fuzz_requests(rng: random.Random, n: int):
    """Valid requests mutated: flipped bytes, cut bodies, lying headers, odd JSON."""
    from helpers.image_modes import MODES

    digit = np.zeros((8, 8), np.uint8)
    digit[2:6, 3:5] = 255
    seeds = [save(digit) for save in MODES.values()]
    for _ in range(n):
        choice = rng.random()
        if choice < 0.5:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.3:
                data = data[: rng.randrange(1, len(data))]
            body, kind = multipart([("f.png", bytes(data))])
        elif choice < 0.8:
            value = rng.choice([0.5, -1e30, 7, [], {}, "x", None, True, [[1, 2], [3]], 2**70])
            shape = [rng.randint(0, 3) for _ in range(rng.randint(0, 6))]
            for size in reversed(shape):
                value = [value] * size
            body, kind = json.dumps({"inputs": value}).encode(), "application/json"
        else:
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
            kind = rng.choice(["multipart/form-data; boundary=x", "application/json", "image/png"])
        yield body, kind


def run_fuzz(url: str, n: int, seed: int = 0) -> dict[int, int]:
    counts: dict[int, int] = {}
    for body, kind in fuzz_requests(random.Random(seed), n):
        status, out = request(url + "/predict", body, kind)
        counts[status] = counts.get(status, 0) + 1
        assert status < 500, (status, out, body[:200])
    metrics = request(url + "/metrics")[1].decode()
    assert 'status="500"' not in metrics
    return counts


def test_fuzzed_requests_never_get_a_500(guarded):
    counts = run_fuzz(guarded[1], 150)
    assert counts.get(200, 0) > 0 and len(counts) > 2, counts


@pytest.mark.slow
def test_fuzzed_requests_never_get_a_500_long(guarded):
    print(run_fuzz(guarded[1], 5000, seed=1))


def test_deadline_answers_503_with_retry_after():
    """max_request_s: a request still unanswered gets 503 + Retry-After (in-process ASGI)."""
    import asyncio

    from litlab.serving.app import Deadline

    async def slow_app(scope, receive, send):
        await asyncio.sleep(5)

    sent = []

    async def send(message):
        sent.append(message)

    async def main():
        await Deadline(slow_app, 0.05, 3)({"type": "http"}, None, send)

    asyncio.run(main())
    assert sent[0]["status"] == 503 and (b"retry-after", b"3") in sent[0]["headers"]
    assert "max_request_s" in json.loads(sent[1]["body"])["error"]


def test_nifti_gzip_bomb_is_refused_from_its_header():
    """A 49 kB .nii.gz whose header claims 2000^3 voxels: 413 before any voxel is inflated."""
    import gzip

    import nibabel as nib

    # their imports are not what is timed
    import litlab.domains.medical3d.volumes  # noqa: F401
    from litlab.domains.medical3d import nifti
    from litlab.tasks.checks import BadRequest

    header = nib.Nifti1Header()
    header.set_data_shape((2000, 2000, 2000))
    header.set_data_dtype(np.uint8)
    bomb = gzip.compress(header.binaryblock + b"\0" * 4 + b"\0" * 50_000_000)
    start_ = time.perf_counter()
    with pytest.raises(BadRequest, match="max_volume_voxels") as err:
        nifti.read_upload(bomb, "bomb.nii.gz", 1)
    assert err.value.status == 413 and time.perf_counter() - start_ < 0.5
    assert nifti.nifti_voxels(b"not a volume" * 50) == 0
