"""The cells of the feature x domain matrix (tests/feature_matrix.py): each runs one entry
point in a subprocess, as a user would, and returns a `Cell` (status and the number it made,
or the one line it refused with). Nothing here imports litlab at module level: the commands
are the product. The slow test's rows (`Ctx.in_process`) run some of them inside the test's
process instead (`run_here`): the same script, argv and exit code, without an interpreter's
start-up each (federate there calls its clients in this process: `Ctx.federate_here`)."""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null"]
QUIET_AFTER = ["extras.print_config=false"]  # entry points without a callbacks group
# a refusal must come before any work; slower than this (on a loaded machine: the seconds
# are in the cell) it is marked "(late)"
REFUSAL_S = 30.0


@dataclass
class Cell:
    status: str  # ok | refused | FAILED | n/a (a cell it depends on did not produce a run)
    text: str  # the metric or size, or the one-line reason
    seconds: float = 0.0
    path: str = ""  # what it produced (a checkpoint, a file), for the cells after it

    def as_dict(self) -> dict:
        return {"status": self.status, "text": self.text, "seconds": round(self.seconds, 1)}


@dataclass
class Ctx:
    """Where a row's runs go, and what the earlier cells of the row produced."""

    log_dir: Path
    env: dict
    ckpt: str = ""  # the train cell's best checkpoint
    onnx: str = ""  # the export cell's model.onnx
    # format -> (process, run dir) of an earlier export.py run that wrote it among others
    exported: dict = field(default_factory=dict)
    # the cells whose process is not what they show run in this one (`run_here`): train,
    # eval, inspect, tune=lr, the CPU exports and compress; the TensorRT refusal (an exit code
    # and one line on stderr), serve (a server) and federate (Ray) stay processes
    in_process: bool = False
    # with `in_process`: the federate cell runs federate.py here too, its clients called one
    # after another by tests/helpers/federated_engine.py (Flower's server loop and ClientApp,
    # without Ray's daemons and a worker's imports: ~40 s of a cell); False keeps Ray
    federate_here: bool = False


COMPRESS_STEPS = ("prune", "distill", "quantize")
#: the row whose compressed checkpoints eval.py loads in a fresh process, whatever `in_process`
FRESH_EVAL_ROW = "digits_cnn"


def command(column: str, row, ckpt: str = "$CKPT", onnx: str = "$ONNX", port="$PORT"):
    """(entry point, arguments) of `column`'s cell of `row`, as the cell runs it (it adds
    `quiet` and `paths.log_dir`) and as docs/matrix.md prints it: `ckpt` is the train cell's
    best checkpoint, `onnx` the export onnx cell's model.onnx."""
    if column == "train":
        return "train.py", list(row.train)
    if column == "inspect":
        return "train.py", [*row.train, "callbacks=inspect", *row.short]
    if column == "tune=lr":
        return "train.py", [*row.train, "tune=lr", *row.tune]
    if column == "eval":
        return "eval.py", [f"ckpt_path={ckpt}"]
    if column.startswith("export "):
        fmt = column.split()[1]
        formats = row.export_together if fmt in row.export_together else (fmt,)
        return "export.py", [f"ckpt_path={ckpt}", f"formats=[{','.join(formats)}]", *row.export]
    if column == "serve":
        return "serve.py", [f"model_path={onnx}", f"port={port}"]
    if column in COMPRESS_STEPS:
        # structured pruning to half the parameters (the bar of docs/compress.md: >= 95% of
        # the test metric after fine-tuning); 0.1, the default, empties a GAT's heads
        ratio = ["compress.prune.ratio=0.5"] if column == "prune" else []
        extra = row.short if row.compress is None else row.compress
        return "compress.py", [f"ckpt_path={ckpt}", f"compress={column}", *ratio, *extra]
    if column == "federate":
        rounds = ["federate.rounds=2", "federate.num_clients=2"]
        return "federate.py", [*row.federate_args, *rounds, *row.federate]
    raise ValueError(f"no cell {column!r}")


def quiet(script: str) -> list[str]:
    """Console-only settings every cell adds (entry points with a callbacks group: more)."""
    return QUIET if script in ("train.py", "compress.py") else QUIET_AFTER


def run(script: str, args: list[str], ctx: Ctx, timeout: float, here: bool = True):
    """(completed process or None when it timed out, seconds); `here` and `ctx.in_process`:
    run in this process (`run_here`: no timeout)."""
    args = [*quiet(script), *args]
    if here and ctx.in_process:
        started = time.time()
        return run_here(script, args, ctx), time.time() - started
    cmd = [sys.executable, str(ROOT / "src" / script), f"paths.log_dir={ctx.log_dir}", *args]
    started = time.time()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=ctx.env
        )
    except subprocess.TimeoutExpired:
        return None, time.time() - started
    return proc, time.time() - started


@contextlib.contextmanager
def _captured_fds():
    """Whatever this process writes to its stdout and stderr meanwhile, file descriptors
    included (litlab's refusals go to `sys.__stderr__`), read into `.stdout` / `.stderr`."""
    got = SimpleNamespace(stdout="", stderr="")
    streams = sys.stdout, sys.stderr
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for stream in (*streams, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        saved = [os.dup(1), os.dup(2)]
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        text = {"buffering": 1, "encoding": "utf-8", "errors": "replace", "closefd": False}
        with open(1, "w", **text) as sys.stdout, open(2, "w", **text) as sys.stderr:
            try:
                yield got
            finally:
                for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                    with contextlib.suppress(Exception):
                        stream.flush()
                sys.stdout, sys.stderr = streams
                for fd, copy in zip((1, 2), saved, strict=True):
                    os.dup2(copy, fd)
                    os.close(copy)
        for file, name in ((out, "stdout"), (err, "stderr")):
            file.seek(0)
            setattr(got, name, file.read().decode("utf-8", "replace"))


def run_here(script: str, args: list[str], ctx: Ctx):
    """`python src/<script> args` inside this process, as tests/helpers' `command_in_process`
    runs it (runpy of the script: its `cli.run_main`, Hydra and exit code), in the cell's
    environment and working directory; torch's thread count is put back after. A traceback is
    exit 1 with the traceback on stderr, as the interpreter would end. The result reads as a
    subprocess's (returncode, stdout, stderr)."""
    import torch
    from helpers.runs import command_in_process

    threads, cwd, environ = torch.get_num_threads(), os.getcwd(), dict(os.environ)
    os.environ.clear()
    os.environ.update(ctx.env)
    os.chdir(ROOT)
    try:
        with _captured_fds() as got, _clients_here(script == "federate.py"):
            try:
                code, _, _ = command_in_process(script, args, ctx.log_dir, quiet=False)
            except Exception:  # noqa: BLE001 (a crash of the command: its cell says FAILED)
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        torch.set_num_threads(threads)
    code = 0 if code is None else code if isinstance(code, int) else 1
    return SimpleNamespace(returncode=code, stdout=got.stdout, stderr=got.stderr)


@contextlib.contextmanager
def _clients_here(federated: bool):
    """`federated`: Flower's Ray simulation replaced meanwhile by the in-process engine of
    tests/helpers/federated_engine.py (the same server loop and ClientApp, the clients called
    in this process), as tests/test_federated_runs.py runs whole federations."""
    if not federated:
        yield
        return
    from helpers.federated_engine import engine

    import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)
    from litlab.federated import processes

    saved, processes.simulate = processes.simulate, engine()
    try:
        yield
    finally:
        processes.simulate = saved


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def outcome(proc, seconds: float, timeout: float) -> Cell | None:
    """A Cell for a run that did not succeed (None: it exited 0)."""
    if proc is None:
        return Cell("FAILED", f"timed out after {timeout:.0f} s", seconds)
    if proc.returncode == 0:
        return None
    err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    if proc.returncode == 2 and len(err) == 1:
        late = f" (late: {seconds:.0f} s)" if seconds > REFUSAL_S else ""
        return Cell("refused", err[0].strip() + late, seconds)
    what = "traceback" if "Traceback" in proc.stderr else f"exit {proc.returncode}"
    return Cell("FAILED", f"{what}: {last_line(proc.stderr or proc.stdout)}", seconds)


def run_dir_of(stdout: str, log_dir: Path, task: str) -> Path:
    m = re.search(r"run dir\s+(\S+)", stdout)
    if m:
        return Path(m.group(1))
    return max((log_dir / task / "runs").glob("*"))


def metric_text(metrics: dict, keys: tuple) -> str:
    for key in keys:
        if key in metrics:
            return f"{key} {metrics[key]:.4f}"
    return "no test metric"


TEST_KEYS = ("test/acc", "test/dice", "test/auroc", "test/f1", "test/r2")


def train(row, ctx: Ctx, column="train", timeout=1800) -> Cell:
    proc, s = run(*command(column, row), ctx, timeout)
    if (bad := outcome(proc, s, timeout)) is not None:
        return bad
    out = run_dir_of(proc.stdout, ctx.log_dir, "train")
    metrics = json.loads((out / "metrics.json").read_text())
    best = sorted((out / "checkpoints").glob("epoch_*.ckpt")) or [out / "checkpoints/last.ckpt"]
    return Cell("ok", metric_text(metrics, TEST_KEYS), s, str(best[-1]))


def evaluate(row, ctx: Ctx, timeout=900) -> Cell:
    proc, s = run(*command("eval", row, ctx.ckpt), ctx, timeout)
    if (bad := outcome(proc, s, timeout)) is not None:
        return bad
    out = run_dir_of(proc.stdout, ctx.log_dir, "eval")
    metrics = json.loads((out / "metrics.json").read_text())
    preds = out / "predictions.csv"
    rows = len(preds.read_text().splitlines()) - 1 if preds.is_file() else 0
    return Cell("ok", f"{metric_text(metrics, TEST_KEYS)}; {rows} predictions", s)


def inspect(row, ctx: Ctx, timeout=1800) -> Cell:
    cell = train(row, ctx, "inspect", timeout)
    if cell.status != "ok":
        return cell
    run = Path(cell.path).parents[1]
    pictures = [p for p in run.rglob("*.png")]
    return Cell("ok", f"{len(pictures)} pictures", cell.seconds)


def export(fmt: str):
    def cell(row, ctx: Ctx, timeout=900) -> Cell:
        if fmt in ctx.exported:  # an earlier cell's export.py run wrote and judged it too
            return judge_export(fmt, *ctx.exported.pop(fmt), 0.0, ctx, timeout, shared=True)
        here = fmt != "tensorrt"
        proc, s = run(*command(f"export {fmt}", row, ctx.ckpt), ctx, timeout, here)
        out = None
        if proc is not None and proc.returncode in (0, 1):
            out = run_dir_of(proc.stdout, ctx.log_dir, "export")
            for other in row.export_together if fmt in row.export_together else ():
                if other != fmt:
                    ctx.exported[other] = (proc, out)
        return judge_export(fmt, proc, out, s, ctx, timeout)

    return cell


def judge_export(fmt: str, proc, out, s: float, ctx: Ctx, timeout: float, shared=False) -> Cell:
    """The cell of `fmt` from the report that the export.py run `proc` wrote in `out`;
    `shared`: an earlier cell started that run (its seconds are that cell's)."""
    if out is None or not (out / "export_report.json").is_file():
        return outcome(proc, s, timeout) or Cell("FAILED", "no export_report.json", s)
    report = json.loads((out / "export_report.json").read_text())
    r = report["formats"].get(fmt, {})
    by = " (the export.py run of an earlier cell)" if shared else ""
    if r.get("ok"):
        if fmt == "onnx":
            ctx.onnx = str(out / r["file"])
        size = r["size_bytes"] / 1e3
        return Cell("ok", f"{report['metric']} {r['metric']:.4f}; {size:,.0f} kB{by}", s)
    if proc.returncode == 0 and not (out / r.get("file", "none")).exists():
        return Cell("refused", (r.get("error") or r.get("skipped") or "not written") + by, s)
    return Cell("FAILED", (r.get("error") or f"exit {proc.returncode}: check failed") + by, s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def request_body(meta: dict) -> dict:
    """One request in the model's input layout (zeros: the answer's shape is what is checked)."""
    layout = meta["inputs"]
    if "edge_index" in layout:
        n, f = 5, int(layout["x"]["shape"][1])
        body = {"x": [[0.0] * f] * n, "edge_index": [[0, 1, 2, 3], [1, 2, 3, 4]]}
        return body | ({"batch": [0] * n} if "batch" in layout else {})
    shape = layout["x"]["shape"]
    if "patch_size" in layout:  # volumes by sliding windows: a patch-sized one
        shape = [1, shape[1], *layout["patch_size"]]
    else:
        shape = [1, *[int(s) for s in shape[1:]]]

    def zeros(dims):
        return [zeros(dims[1:]) for _ in range(dims[0])] if dims else 0.0

    return {"inputs": zeros(shape)}


def serve(row, ctx: Ctx, timeout=300) -> Cell:
    if not ctx.onnx:
        return Cell("n/a", "no model.onnx (export onnx did not pass)")
    from helpers.serve import Drained  # the server's output read while it runs

    port = free_port()
    script, args = command("serve", row, onnx=ctx.onnx, port=port)
    cmd = [sys.executable, str(ROOT / "src" / script), f"paths.log_dir={ctx.log_dir}"]
    cmd += [*quiet(script), *args]
    started = time.time()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=ctx.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = Drained(proc.stdout)
    try:
        return _ask(proc, f"http://127.0.0.1:{port}", started, timeout, out)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _ask(proc, base: str, started: float, timeout: float, out) -> Cell:
    """The served model's answer to one request once /health says it is up."""
    try:
        while time.time() - started < timeout:
            if proc.poll() is not None:
                return Cell("FAILED", f"exit {proc.returncode}: {last_line(out.read())}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        meta = json.load(urllib.request.urlopen(base + "/metadata", timeout=10))
        body = json.dumps(request_body(meta)).encode()
        req = urllib.request.Request(base + "/predict", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.load(r)
        keys = sorted(k for k in answer if k != "request_id")
        return Cell("ok", f"200, answer keys {', '.join(keys)}", time.time() - started)
    except Exception as err:  # noqa: BLE001
        return Cell("FAILED", f"{type(err).__name__}: {str(err)[:200]}", time.time() - started)


def compress(step: str):
    def cell(row, ctx: Ctx, timeout=1800) -> Cell:
        proc, s = run(*command(step, row, ctx.ckpt), ctx, timeout)
        if (bad := outcome(proc, s, timeout)) is not None:
            return bad
        out = run_dir_of(proc.stdout, ctx.log_dir, "compress")
        report = json.loads((out / "compress_report.json").read_text())
        first, last = report["stages"][0], report["stages"][-1]
        metric = report["metric"]
        text = f"{metric} {first[metric]:.4f} -> {last[metric]:.4f}"
        if step == "quantize" and first.get("onnx_mb") and last.get("onnx_mb"):
            text += f"; ONNX {first['onnx_mb']:.3f} -> {last['onnx_mb']:.3f} MB"
        elif first.get("params") and last.get("params"):
            a, b = first["nonzero_params"], last["nonzero_params"]
            text += f"; non-zero params {a:,} -> {b:,} ({b / a:.0%})"
        if step != "quantize":  # the compressed checkpoint must load in eval.py
            ckpt = max(out.glob(f"*_{step}.ckpt"))
            # in this process where the row's cells run here, except the digits row's: there
            # a fresh eval.py process loads it, helped by nothing compress.py imported
            here = ctx.in_process and row.name != FRESH_EVAL_ROW
            check = Ctx(ctx.log_dir, ctx.env, str(ckpt), in_process=here)
            ev = evaluate(row, check)
            if ev.status != "ok":
                return Cell(
                    "FAILED", f"eval.py of the {step} checkpoint: {ev.text}", s + ev.seconds
                )
            text += "; eval.py loads it"
            s += ev.seconds
        return Cell("ok", text, s)

    return cell


def federate(row, ctx: Ctx, timeout=600) -> Cell:
    proc, s = run(*command("federate", row), ctx, timeout, here=ctx.federate_here)
    if (bad := outcome(proc, s, timeout)) is not None:
        return bad
    out = run_dir_of(proc.stdout, ctx.log_dir, "federate")
    import csv

    with open(out / "history.csv") as f:
        rows = list(csv.DictReader(f))
    metrics = json.loads((out / "metrics.json").read_text())  # the global model's, last round
    return Cell("ok", f"{len(rows) - 1} rounds; {metric_text(metrics, TEST_KEYS)}", s)


def tune_lr(row, ctx: Ctx, timeout=1800) -> Cell:
    cell = train(row, ctx, "tune=lr", timeout)
    if cell.status != "ok":
        return cell
    run = Path(cell.path).parents[1]
    found = run / "tune" / "lr.json"
    lr = json.loads(found.read_text())["lr"] if found.is_file() else None
    return Cell(
        "ok", f"lr {lr:.3g}; {cell.text}" if lr else f"no suggestion; {cell.text}", cell.seconds
    )


def tree_commit() -> str:
    """The commit of the tree the cells run on, `+changes` when it has uncommitted changes to
    tracked files (what a page generated from it must name)."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head or 'unknown'}{'+changes' if dirty else ''}"


def git_status() -> set[str]:
    out = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    return set(out.stdout.splitlines())


def clean_env(data_dir: Path) -> dict:
    """The cells' environment: one torch thread each (`threads=auto` follows OMP_NUM_THREADS),
    so a cell's figures are the same on an idle machine and beside another row."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "LITLAB_DATA_DIR": str(data_dir),
        "OMP_NUM_THREADS": "1",
    }
