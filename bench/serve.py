"""Serving bars: the digits CNN over real HTTP on 127.0.0.1, one PNG image per request.

    python bench/serve.py --model logs/export/runs/<ts>/model.onnx   # a model from export.py
    python bench/serve.py --requests 4000 --seconds 30               # the bounds of each loop
    python bench/serve.py --loop asyncio                             # the client on asyncio's loop
    python bench/serve.py --model M --baseline /tmp/old --rounds 2   # alternate with old code
Starts `src/serve.py` in a subprocess for each mode (a shared ONNX Runtime session; dynamic
micro-batching with max_wait_ms 1 and 3), then runs a bounded load loop: `--concurrency`
keep-alive connections (asyncio, loopback only), each sending requests back to back, until
`--requests` are answered or `--seconds` pass. Prints p50/p99 latency and requests/s per mode,
and the server's CPU time per request (from /proc: what the load costs the server whatever else
runs on the machine; 1 / that is the requests/s one free core could serve).
Bars: p99 <= 10 ms at concurrency 8 and >= 500 requests/s (2 cores; the client shares them).
`--baseline DIR` (another checkout, e.g. `git worktree add /tmp/old <commit>`) runs each mode
on this code and on DIR's in turn, `--rounds` times: on a shared machine the ratio of
neighbouring runs holds better than the absolute figures.
"""

import argparse
import asyncio
import io
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "shared session": ["batching=false"],
    "micro-batching 1 ms": ["batching=true", "max_wait_ms=1"],
    "micro-batching 3 ms": ["batching=true", "max_wait_ms=3"],
    "shared session, 2 workers": ["batching=false", "workers=2"],
}


def png_request(port: int) -> bytes:
    """One raw HTTP/1.1 request uploading a digits test image as PNG (multipart)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    buf = io.BytesIO()
    Image.fromarray((load_digits().images[0] / 16 * 255).astype(np.uint8)).save(buf, "PNG")
    b = "benchboundary"
    body = (
        (
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="0.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + buf.getvalue()
        + f"\r\n--{b}--\r\n".encode()
    )
    head = (
        f"POST /predict HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: multipart/"
        f"form-data; boundary={b}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def client(port: int, raw: bytes, state: dict, latencies: list) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while state["left"] > 0 and time.perf_counter() < state["stop"]:
            state["left"] -= 1
            start = time.perf_counter()
            writer.write(raw)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(
                    line.split(b":")[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            await reader.readexactly(length)
            if not head.startswith(b"HTTP/1.1 200"):
                state["errors"] += 1
            latencies.append(time.perf_counter() - start)
    finally:
        writer.close()


async def load(raw: bytes, port: int, concurrency: int, requests: int, seconds: float) -> dict:
    latencies = []
    state = {"left": requests, "stop": time.perf_counter() + seconds, "errors": 0}
    await asyncio.gather(
        *(
            client(port, raw, {"left": 50, "stop": state["stop"], "errors": 0}, [])
            for _ in range(concurrency)
        )
    )  # warm-up
    state["stop"] = time.perf_counter() + seconds
    start = time.perf_counter()
    await asyncio.gather(*(client(port, raw, state, latencies) for _ in range(concurrency)))
    wall = time.perf_counter() - start
    ms = np.asarray(latencies) * 1e3
    return {
        "n": len(ms),
        "p50": np.percentile(ms, 50),
        "p99": np.percentile(ms, 99),
        "rps": len(ms) / wall,
        "errors": state["errors"],
    }


def run(coroutine, loop: str):
    """The load loop on uvloop (installed with uvicorn[standard], the server's loop too) or on
    asyncio's own: the client shares the 2 cores, so its CPU per request counts."""
    if loop == "asyncio":
        return asyncio.run(coroutine)
    import uvloop

    return uvloop.run(coroutine)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(pid: int) -> float:
    """The server process and its worker processes (workers=N)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return cpu_seconds(pid) + sum(cpu_seconds(int(c)) for c in children)


def serve(
    model: Path, port: int, extra: list[str], log_dir: str, root: Path = ROOT
) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(root / "src" / "serve.py"),
            f"model_path={model}",
            f"port={port}",
            f"paths.log_dir={log_dir}",
            "extras.print_config=false",
            *extra,
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("serve.py did not become ready: " + proc.stderr.read().decode()[-2000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model.onnx of the digits CNN")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--port", type=int, default=8971)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--baseline", type=Path, help="another checkout to alternate with")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES))
    args = parser.parse_args()
    import tempfile

    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared with other "
        f"work: figures are noisy); concurrency {args.concurrency}, one PNG per request\n"
    )
    print(
        "| mode | code | requests | p50 (ms) | p99 (ms) | requests/s | server CPU ms/request "
        "| client CPU ms/request | errors | bars (p99<=10, >=500/s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    roots = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    runs = [
        (name, code, root)
        for _ in range(args.rounds)
        for name in args.modes
        for code, root in roots
    ]
    with tempfile.TemporaryDirectory() as logs:
        for name, code, root in runs:
            extra = MODES[name]
            proc = serve(Path(args.model).resolve(), args.port, extra, logs, root)
            try:
                raw = png_request(args.port)
                cpu, mine = server_cpu_seconds(proc.pid), time.process_time()
                r = run(
                    load(raw, args.port, args.concurrency, args.requests, args.seconds), args.loop
                )
                cpu, mine = server_cpu_seconds(proc.pid) - cpu, time.process_time() - mine
                sent = r["n"] + 50 * args.concurrency  # the warm-up requests count too
                r["cpu_ms"], r["client_ms"] = cpu * 1e3 / sent, mine * 1e3 / sent
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
            bars = "met" if r["p99"] <= 10 and r["rps"] >= 500 else "NOT met"
            print(
                f"| {name} | {code} | {r['n']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['rps']:.0f} | "
                f"{r['cpu_ms']:.2f} | {r['client_ms']:.2f} | {r['errors']} | {bars} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
