"""Hostile clients against the digits service: none may get a 500 or grow the server.

    python bench/serve_hostile.py --model logs/export/runs/<ts>/model.onnx [--rounds 3]

Default limits; per round: text-chunk bombs, multi-page TIFFs, lying JPEG headers, cut PNGs,
5000 multipart parts, endless chunked bodies, many headers, slow bodies, pipelining, unknown
modes, NaN floats, lying Content-Lengths, aborted uploads, idle connections up to and past
max_connections, with /health polled every 50 ms. Prints statuses, the slowest /health, the
server's VmRSS, idle/slow clients' fate, and a SIGTERM with 8 requests in flight.
"""

import argparse
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image, PngImagePlugin

ROOT = Path(__file__).resolve().parents[1]


def save(img, fmt="PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def digit() -> np.ndarray:
    from sklearn.datasets import load_digits

    return (load_digits().images[3] / 16 * 255).astype(np.uint8)


def text_bomb() -> bytes:
    info = PngImagePlugin.PngInfo()
    for i in range(20):
        info.add_text(f"k{i}", "a" * 5_000_000, zip=True)  # 20 x 5 MB of text, ~100 kB sent
    return save(Image.fromarray(digit()), pnginfo=info)


def tiff_pages(n: int = 100) -> bytes:
    pages = [Image.fromarray(np.full((256, 256), i % 256, np.uint8)) for i in range(n)]
    return save(pages[0], "TIFF", save_all=True, append_images=pages[1:])


def jpeg_claiming(side: int) -> bytes:
    raw = bytearray(save(Image.fromarray(digit()), "JPEG"))
    i = raw.index(b"\xff\xc0")  # SOF0: height and width follow the length and precision
    raw[i + 5 : i + 9] = side.to_bytes(2, "big") * 2
    return bytes(raw)


def multipart(files, boundary="hb7") -> tuple[bytes, str]:
    parts = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n'.encode()
        + f
        + b"\r\n"
        for f in files
    )
    return parts + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def http(body: bytes, kind: str, extra: str = "", path="/predict", length=None) -> bytes:
    length = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Type: {kind}\r\nContent-Length: {length}\r\n"
        f"{extra}\r\n"
    ).encode() + body


def exchange(port, data: bytes, pause=0.0, chunk=1, wait=60.0, close_after=None) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        try:
            if pause:
                for i in range(0, len(data), chunk):
                    s.sendall(data[i : i + chunk])
                    time.sleep(pause)
            else:
                s.sendall(data)
            if close_after is not None:
                time.sleep(close_after)
                return b""
        except OSError:
            pass
        out = b""
        try:
            while c := s.recv(1 << 16):
                out += c
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def statuses(raw: bytes) -> list[int]:
    """The status of each response in the bytes (pipelined ones follow bodies directly)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)]


def hostile(port: int) -> dict[str, bytes]:
    d = digit()
    cut = save(Image.fromarray(d))
    nan = np.full((8, 8), np.nan, np.float32)
    one = save(Image.fromarray(d))
    endless = (
        b"POST /predict HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"100000\r\n" + b"1," * 0x80000 + b"\r\n"
    ) * 1 + (b"100000\r\n" + b"1," * 0x80000 + b"\r\n") * 9
    requests = {
        "PNG text-chunk bomb": http(*multipart([text_bomb()])),
        "100-page TIFF": http(*multipart([tiff_pages()])),
        "JPEG claiming 60000x60000": http(*multipart([jpeg_claiming(60000)])),
        "PNG cut in half": http(*multipart([cut[: len(cut) // 2]])),
        "5000 empty parts": http(*multipart([b""] * 5000)),
        "boundary never closed": http(multipart([one])[0][:-8], multipart([one])[1]),
        "endless chunked body": endless,
        "2000 small headers": b"GET /health HTTP/1.1\r\nHost: h\r\n"
        + b"".join(f"a{i}: b\r\n".encode() for i in range(2000))
        + b"\r\n",
        "JSON over max_json_bytes": http(
            json.dumps({"inputs": [0] * 1_500_000}).encode(), "application/json"
        ),
        "float TIFF of NaN": http(*multipart([save(Image.fromarray(nan), "TIFF")])),
        "LAB TIFF": http(
            *multipart([save(Image.fromarray(d).convert("RGB").convert("LAB"), "TIFF")])
        ),
        "HTTP/1.0 without Host": b"GET /health HTTP/1.0\r\n\r\n",
        "unknown path with body": http(b"x" * 1000, "text/plain", path="/admin"),
        "Content-Length 10^20": http(b"{}", "application/json", length=10**20),
        "Content-Length -5": http(b"{}", "application/json", length=-5),
        "Expect 100-continue, 1 GB": http(
            b"", "image/png", "Expect: 100-continue\r\n", length=1 << 30
        ),
        "50 pipelined": b"".join(http(*multipart([one]), "") for _ in range(50)),
    }
    return requests


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def start(model: Path, port: int, logs: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "src" / "serve.py"),
            f"model_path={model}",
            f"port={port}",
            f"paths.log_dir={logs}",
            "extras.print_config=false",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for _ in range(600):
        try:
            if statuses(
                exchange(
                    port, b"GET /health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", wait=2
                )
            ) == [200]:
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("serve.py did not become ready: " + proc.stdout.read()[-2000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=8977)
    args = parser.parse_args()
    import tempfile

    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared machine)")
    logs = tempfile.mkdtemp()
    proc = start(Path(args.model).resolve(), args.port, logs)
    port, counts, worst, stop = args.port, {}, [0.0], threading.Event()
    peak = [rss_mb(proc.pid)]
    before = peak[0]

    paused = threading.Event()

    def poll():
        while not stop.is_set():
            if paused.is_set():
                time.sleep(0.05)
                continue
            t = time.perf_counter()
            ok = statuses(
                exchange(
                    port, b"GET /health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", wait=5
                )
            ) == [200]
            worst[0] = max(worst[0], time.perf_counter() - t if ok else 99.0)
            peak[0] = max(peak[0], rss_mb(proc.pid))
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    requests = hostile(port)
    for r in range(args.rounds):
        for name, raw in requests.items():
            got = statuses(exchange(port, raw, wait=60))
            for s in got or [0]:
                counts.setdefault(name, {}).setdefault(s, 0)
                counts[name][s] += 1
        # an aborted upload, idle and slow clients, many idle connections, then too many
        exchange(port, http(*multipart([save(Image.fromarray(digit()))])), close_after=0.0)
        t = time.perf_counter()
        idle = exchange(port, b"", wait=30)
        idle_s = time.perf_counter() - t
        t = time.perf_counter()
        body = http(b'{"inputs": [[[[0]]]]}', "application/json")
        slow = statuses(exchange(port, body, pause=1.0, chunk=3, wait=60))
        slow_s = time.perf_counter() - t
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(950)]
        time.sleep(2.0)  # /health keeps answering beside 950 idle connections
        paused.set()  # past max_connections /health itself would get the 503
        time.sleep(0.2)
        held += [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]
        time.sleep(1.0)
        refused = 0
        for s in held[1000:]:
            s.settimeout(2)
            try:
                refused += b" 503 " in s.recv(4096)
            except OSError:
                pass
        for s in held:
            s.close()
        time.sleep(0.5)
        paused.clear()
        print(
            f"round {r + 1}: idle client closed after {idle_s:.1f} s ({idle!r}), slow client "
            f"{slow} after {slow_s:.1f} s, {refused}/100 connections past max_connections got "
            "503",
            flush=True,
        )
    stop.set()
    poller.join()
    after = rss_mb(proc.pid)
    # SIGTERM with 8 accepted requests in flight: 4 decoding large images, 2 mid-body, 2 small
    big = np.add.outer(np.arange(3000), np.arange(3000)).astype(np.uint8)
    large = http(
        *multipart([save(Image.fromarray(np.dstack([big] * 4), "RGBA"), compress_level=1)])
    )
    small = http(*multipart([save(Image.fromarray(digit()))]))
    answers = [None] * 8

    def client(i):
        raw = large if i < 4 else small
        answers[i] = statuses(
            exchange(
                port, raw, pause=0.5 if i in (4, 5) else 0.0, chunk=len(raw) // 3 + 1, wait=120
            )
        )

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.6)
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(150)
    code = proc.wait(60)
    print("\n| hostile request | statuses (count) |\n|---|---|")
    for name, c in counts.items():
        print(f"| {name} | {', '.join(f'{s} ({n})' for s, n in sorted(c.items()))} |")
    fives = sum(n for c in counts.values() for s, n in c.items() if s >= 500 and s != 503)
    print(
        f"\n5xx other than 503: {fives}; slowest /health: {worst[0] * 1e3:.0f} ms; server "
        f"RSS {before:.0f} MB before, {peak[0]:.0f} MB peak, {after:.0f} MB after "
        f"(growth {after - before:+.0f} MB, peak {peak[0] - before:+.0f} MB)"
    )
    print(f"SIGTERM with 8 in flight: answers {answers}, exit code {code}")
    ok = fives == 0 and after - before < 300 and worst[0] < 0.2 and code == 0
    ok = ok and all(a == [200] for a in answers)
    print("bars:", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
