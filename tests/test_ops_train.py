"""A model with litlab's custom op end to end, as a user runs it: the digits CNN with
`model.net.linear_impl=tiled` trains from `python src/train.py` to >= 98% test accuracy,
continues with `ckpt_path=last`, exports (ONNX as plain MatMul, pt2 with the op) with every
format verified against the checkpoint, and the ONNX file is served by `src/serve.py` in a
process that could not build the extension (no compiler, an empty kernel cache)."""

import json

import pytest
import torch
from helpers.runs import results, run_cli, run_dirs
from helpers.serve import request, start

pytestmark = pytest.mark.slow

TILED = ["model.net.linear_impl=tiled", "data.num_workers=0"]


@pytest.fixture(scope="module")
def tiled_run(tmp_path_factory):
    logs = tmp_path_factory.mktemp("ops_train") / "logs"
    proc = run_cli("train.py", *TILED, "trainer.max_epochs=12", log_dir=logs, timeout=900)
    [run] = run_dirs(logs)
    return {"logs": logs, "run": run, "stdout": proc.stdout}


def last_state(run):
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)


def test_trains_to_98_percent_and_resumes(tiled_run):
    [res] = results(tiled_run["stdout"])
    assert res["test/acc"] >= 0.98, res
    run = tiled_run["run"]
    state = last_state(run)
    step, epoch = state["global_step"], state["epoch"]
    from litlab.checkpointing.run_config import CONFIG_KEY

    assert state[CONFIG_KEY]["model"]["net"]["linear_impl"] == "tiled"
    proc = run_cli(
        "train.py",
        *TILED,
        "ckpt_path=last",
        f"trainer.max_epochs={epoch + 2}",
        log_dir=tiled_run["logs"],
        timeout=600,
    )
    assert run_dirs(tiled_run["logs"]) == [run], "continued in its own run dir"
    resumed = last_state(run)
    assert resumed["epoch"] == epoch + 1 and resumed["global_step"] > step, proc.stdout[-2000:]


def test_export_and_serve_without_the_extension(tiled_run, tmp_path):
    import onnx

    from litlab.domains.vision.data import DigitsDataModule
    from litlab.export.recipe import export_checkpoint
    from litlab.runs.rebuild import load_run

    best = next((tiled_run["run"] / "checkpoints").glob("epoch_*.ckpt"))
    out = tmp_path / "export"
    report = export_checkpoint(
        best, out, formats=["onnx", "pt2", "onnx_int8"], latency={"batch_sizes": []}
    )
    assert report["ok"], report  # each format's outputs and test metric checked
    model = onnx.load(str(out / "model.onnx"))
    kinds = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("", "MatMul") in kinds and all(d in ("", "ai.onnx") for d, _ in kinds), kinds

    dm = DigitsDataModule()
    dm.setup()
    x, _ = dm.on_after_batch_transfer((dm.test_set.images[:32], dm.test_set.labels[:32]), 0)
    net = load_run(best).model.net.eval()
    with torch.no_grad():
        eager = net(x).argmax(1).tolist()

    # a service that could not build the op if it tried: no compiler, an empty kernel cache
    env = {"CXX": "no-such-c++", "LITLAB_OPS_CACHE": str(tmp_path / "empty_cache")}
    proc, url = start(out / "model.onnx", tmp_path / "serve_logs", env=env)
    try:
        body = json.dumps({"inputs": x.tolist()}).encode()
        status, answer = request(url + "/predict", body, "application/json")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert status == 200 and answer["class_ids"] == eager
    assert not (tmp_path / "empty_cache").exists()
