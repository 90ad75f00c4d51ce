"""The README's curl lines, run as written (from the project root, with the sample inputs of
examples/) against models served by src/serve.py on 127.0.0.1: the digit is read as a 3, the
graph gets one class per node."""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from helpers.runs import ROOT, run_cli, run_dirs

pytestmark = [
    pytest.mark.slow,  # two servers start (torch, ONNX Runtime) and a graph model trains
    pytest.mark.xdist_group("digits_run"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed"),
]


def readme_curls() -> dict[str, str]:
    """The README's curl lines that send a file of examples/, by that file's name."""
    readme = (ROOT / "README.md").read_text()
    lines = re.findall(r"curl [^`\n#]*examples/[^`\n#]*", readme)
    return {re.search(r"examples/(\S+)", line).group(1): line.strip() for line in lines}


def serve(model, logs):
    """src/serve.py on a free port; returns (process, port) once /health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "src" / "serve.py"), f"model_path={model}", f"port={port}"]
        + [f"paths.log_dir={logs}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        assert proc.poll() is None, f"serve.py exited {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.5)
    raise AssertionError("serve.py did not become ready")


def curl(line: str, port: int) -> dict:
    """Run a README line as written, pointed at this test's port."""
    args = shlex.split(line.replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
    done = subprocess.run([*args, "-s", "-S"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def stop(proc) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)


def test_readme_curl_lines_cover_the_examples():
    assert set(readme_curls()) == {"digit.png", "graph.json"}
    assert (ROOT / "examples" / "README.md").is_file()  # the NIfTI note


def test_the_digit_example_is_read_as_a_3(digits_run, tmp_path):
    proc, port = serve(digits_run.best, tmp_path / "logs")  # a checkpoint: exported first
    try:
        answer = curl(readme_curls()["digit.png"], port)
    finally:
        stop(proc)
    assert answer["class_ids"] == [3] and answer["predictions"] == ["3"], answer


def test_the_graph_example_gets_a_class_per_node(tmp_path):
    logs = tmp_path / "logs"
    run_cli("train.py", "model=gnn", "trainer.max_epochs=3", "test=false", log_dir=logs)
    proc, port = serve(run_dirs(logs)[-1] / "checkpoints" / "last.ckpt", logs)
    try:
        answer = curl(readme_curls()["graph.json"], port)
    finally:
        stop(proc)
    nodes = len(json.loads((ROOT / "examples" / "graph.json").read_text())["x"])
    assert len(answer["class_ids"]) == nodes and set(answer["class_ids"]) <= {0, 1, 2, 3}, answer
