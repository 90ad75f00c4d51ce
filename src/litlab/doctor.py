"""`make doctor` (= `python -m litlab.doctor [--json]`): is this machine ready to train?

A first hour lost to a missing NCCL, a loopback interface that is down or a full disk is worse
than the seconds spent here. Every check reports a fact; the required ones (Python, a matmul on
each device, a 2-process all-reduce, loopback, writable logs/ and data/) set exit code 1, with
one line each, when they fail.
"""

import argparse
import datetime
import importlib.metadata as md
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "torch",
    "lightning",
    "torch-geometric",
    "monai",
    "hydra-core",
    "torchmetrics",
    "onnxruntime",
    "mlflow",
    "wandb",
    "flwr",
]
# each local dataset as the datamodules read it, relative to data_dir
DATASETS = {
    "MNIST": "MNIST/raw",
    "FashionMNIST": "FashionMNIST/raw",
    "CIFAR10": "cifar-10-batches-py",
    "Cora": "Planetoid/Cora/raw",
    "CiteSeer": "Planetoid/CiteSeer/raw",
    "MUTAG": "TUDataset/MUTAG/raw",
    "PROTEINS": "TUDataset/PROTEINS/raw",
}


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def versions() -> dict:
    import torch

    facts = {"python": sys.version.split()[0], **{p: _version(p) for p in PACKAGES}}
    facts["cuda"] = torch.version.cuda
    facts["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    facts["nccl"] = None
    if torch.cuda.is_available():
        nccl = torch.cuda.nccl.version()
        facts["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return facts


def _matmul(device: str) -> dict:
    import torch

    from litlab.errors import one_line

    start = time.perf_counter()
    try:
        a = torch.randn(256, 256, device=device)
        ok = bool(torch.allclose((a @ torch.eye(256, device=device)).cpu(), a.cpu(), atol=1e-4))
        return {"ok": ok, "ms": round(1000 * (time.perf_counter() - start), 1)}
    except Exception as err:  # noqa: BLE001  (the device is what is being tested)
        return {"ok": False, "error": one_line(err, limit=120)}


def devices() -> list[dict]:
    import torch

    found = [{"name": "cpu", "type": "cpu", "matmul": _matmul("cpu")}]
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        found.append(
            {
                "name": p.name,
                "type": "cuda",
                "index": i,
                "memory_gib": round(p.total_memory / 2**30, 1),
                "capability": f"{p.major}.{p.minor}",
                "bf16": p.major >= 8,
                "tf32": p.major >= 8,
                "matmul": _matmul(f"cuda:{i}"),
            }
        )
    if torch.backends.mps.is_available():
        found.append({"name": "mps", "type": "mps", "matmul": _matmul("mps")})
    return found


def _all_reduce_worker(rank: int, world: int, backend: str, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=20),
    )
    device = f"cuda:{rank % torch.cuda.device_count()}" if backend == "nccl" else "cpu"
    t = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(t)
    if rank == 0:
        Path(out).write_text(str(float(t.item())))
    dist.destroy_process_group()


def all_reduce(backend: str) -> dict:
    """Two processes sum [1] and [2]: 3.0 proves that rendezvous and the collective both work."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(tempfile.gettempdir()) / f"litlab-doctor-{os.getpid()}-{backend}"
    start = time.perf_counter()
    try:
        mp.start_processes(
            _all_reduce_worker,
            args=(2, backend, port, str(out)),
            nprocs=2,
            start_method="spawn",
            join=True,
        )
        return {"ok": out.read_text() == "3.0", "seconds": round(time.perf_counter() - start, 1)}
    except Exception as err:  # noqa: BLE001  (the failure is the report)
        return {"ok": False, "error": str(err).strip().splitlines()[-1][:160]}
    finally:
        out.unlink(missing_ok=True)


def loopback() -> dict:
    """DDP ranks meet at 127.0.0.1: a listening socket there must be reachable."""
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=2):
                pass
        return {"ok": True}
    except OSError as err:
        return {"ok": False, "error": f"{err.strerror or err}; bring it up: ip link set lo up"}


def folder(path: Path) -> dict:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
        free = round(shutil.disk_usage(path).free / 2**30, 1)
        return {"ok": True, "path": str(path), "free_gib": free}
    except OSError as err:
        return {"ok": False, "path": str(path), "error": err.strerror or str(err)}


def datasets(data_dir: Path) -> dict:
    present = {
        name: (data_dir / rel).is_dir() and any((data_dir / rel).iterdir())
        for name, rel in DATASETS.items()
    }
    return {"digits": True, "phantoms": True, **present}  # the embedded two need no files


def trackers() -> dict:
    from litlab.config.resolvers import wandb_offline

    return {
        "wandb": "offline (no login)" if wandb_offline() else "online (logged in)",
        "mlflow": os.environ.get("MLFLOW_TRACKING_URI") or "local SQLite store logs/mlflow.db",
    }


def diagnose(log_dir: Path, data_dir: Path) -> dict:
    import torch

    report = {
        "versions": versions(),
        "devices": devices(),
        "loopback": loopback(),
        "all_reduce": {"gloo": all_reduce("gloo")},
        "folders": {"logs": folder(log_dir), "data": folder(data_dir)},
        "datasets": datasets(data_dir),
        "trackers": trackers(),
    }
    if torch.cuda.is_available():
        report["all_reduce"]["nccl"] = all_reduce("nccl")
    report["failures"] = failures(report)
    return report


def failures(report: dict) -> list[str]:
    """One line per failed required check."""
    lines = []
    if sys.version_info < (3, 11):  # noqa: UP036  (run by another interpreter than .venv's)
        lines.append(f"python {report['versions']['python']}: litlab needs 3.11 or newer")
    for d in report["devices"]:
        if not d["matmul"]["ok"]:
            why = d["matmul"].get("error", "wrong result")
            lines.append(f"matmul on {d['name']} failed: {why}")
    if not report["loopback"]["ok"]:
        why = report["loopback"]["error"]
        lines.append(f"loopback 127.0.0.1 unreachable ({why}): DDP cannot start")
    for backend, r in report["all_reduce"].items():
        if not r["ok"]:
            why = r.get("error", "wrong sum")
            lines.append(f"2-process all-reduce with {backend} failed: {why}")
    for name, r in report["folders"].items():
        if not r["ok"]:
            lines.append(f"{name} folder {r['path']} is not writable: {r['error']}")
    return lines


def facts_table(report: dict) -> str:
    rows = [("versions", ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v))]
    for d in report["devices"]:
        facts = [f"matmul {'ok' if d['matmul']['ok'] else 'FAILED'}"]
        facts += [f"{k} {d[k]}" for k in ("memory_gib", "capability", "bf16", "tf32") if k in d]
        rows.append((f"device {d['name']}", ", ".join(facts)))
    rows.append(("loopback", "up" if report["loopback"]["ok"] else "DOWN"))
    for backend, r in report["all_reduce"].items():
        rows.append((f"all-reduce {backend}", f"ok in {r['seconds']} s" if r["ok"] else "FAILED"))
    for name, r in report["folders"].items():
        state = f"{r['free_gib']} GiB free" if r["ok"] else "NOT WRITABLE"
        rows.append((f"{name}/", f"{r['path']}: {state}"))
    found = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in report["datasets"].items())
    rows.append(("datasets", found))
    rows.append(("trackers", ", ".join(f"{k}: {v}" for k, v in report["trackers"].items())))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run_doctor(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m litlab.doctor", description="Check that this machine is ready to train."
    )
    from litlab import environment

    environment.load_dotenv_files()  # the folders runs use: LITLAB_LOG_DIR, LITLAB_DATA_DIR
    logs = os.environ.get("LITLAB_LOG_DIR") or ROOT / "logs"
    data = os.environ.get("LITLAB_DATA_DIR") or ROOT / "data"
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    parser.add_argument("--log-dir", type=Path, default=logs, help=f"default: {logs}")
    parser.add_argument("--data-dir", type=Path, default=data, help=f"default: {data}")
    args = parser.parse_args(argv)
    report = diagnose(args.log_dir, args.data_dir)
    print(json.dumps(report, indent=2) if args.json else facts_table(report))
    for line in report["failures"]:
        print(f"error: {line}", file=sys.stderr)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(run_doctor())
