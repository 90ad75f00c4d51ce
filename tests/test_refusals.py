"""Bad commands of the after-training entry points (export, serve, compress, federate), table
by table: each is refused in one line naming the key and what is valid, leaves no run dir, and
a pure config error takes under 3 s. In-process through `litlab.api.run` (the same composed
config, run dir and recipe as the command); one subprocess per entry point checks exit 2."""

import socket
import subprocess
import sys

import pytest
from helpers.refusals import FAST_S, fake_checkpoint, refused
from helpers.runs import ROOT

from litlab.compression.recipe import compress
from litlab.export.recipe import export
from litlab.federated.federation import federate
from litlab.serving.server import serve as serve_settings


def serve(cfg):
    """As src/serve.py runs it."""
    from litlab.config import validate

    settings = validate.check(cfg, "serve")
    return serve_settings(settings.model_path, cfg.paths.output_dir, settings)


pytestmark = pytest.mark.xdist_group("refusals")  # the fake checkpoints are made once


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Fake checkpoints (real stored configs, no weights) of three task kinds, and files that
    are not checkpoints."""
    base = tmp_path_factory.mktemp("ckpts")
    (base / "notes.txt").write_text("not a checkpoint")
    (base / "bad.ckpt").write_bytes(b"PK\x03\x04 truncated")
    (base / "folder").mkdir()
    return {
        "digits": fake_checkpoint(base / "digits" / "d.ckpt"),
        "cora": fake_checkpoint(base / "cora" / "c.ckpt", ["model=gnn", "data=cora"]),
        "seg": fake_checkpoint(base / "seg" / "s.ckpt", ["model=unet3d"]),
        "notes": base / "notes.txt",
        "bad": base / "bad.ckpt",
        "folder": base / "folder",
    }


def _fill(overrides: list[str], ckpts: dict) -> list[str]:
    return [o.format(**{k: str(v) for k, v in ckpts.items()}) for o in overrides]


def check(config, recipe, overrides, expected, fast, ckpts, tmp_path):
    message, seconds = refused(config, _fill(overrides, ckpts), recipe, tmp_path / "logs")
    assert expected in message, message
    if fast:
        assert seconds < FAST_S, f"{seconds:.1f} CPU seconds for a config error: {message}"


# (overrides, a part of the line, pure config error: refused within FAST_S)
EXPORT = [
    (["rtol=-1"], "rtol=-1 has the wrong type or value; valid: a relative tolerance > 0", 1),
    (["rtol=abc"], "rtol=abc", 1),
    (["int8_max_drop=-5"], "int8_max_drop=-5", 1),
    (["int8_max_drop=1"], "valid: a share in [0, 1)", 1),
    (["calibration_batches=0"], "calibration_batches=0", 1),
    (["calibration_batches=1.5"], "valid: an integer >= 1", 1),
    (["latency.batch_sizes=[0]"], "latency.batch_sizes[0]=0", 1),
    (["latency.batch_sizes=8"], "latency.batch_sizes=8", 1),
    (["latency.budget_s=-1"], "latency.budget_s=-1", 1),
    (["formats=[onnx,foo]"], "formats[1]=foo", 1),
    (["formats=[]"], "with at least 1 entry", 1),
    (["formats=[onnx,onnx]"], "names a format twice", 1),
    (["+foo=1"], "unknown key foo", 1),
    (["+latency.warmup=1"], "unknown key latency.warmup (valid: batch_sizes, budget_s)", 1),
    (["ckpt_path=/no/such.ckpt"], "ckpt_path=/no/such.ckpt: no such checkpoint file", 1),
    (["ckpt_path={folder}"], "is a folder", 1),
    (["ckpt_path={notes}"], "cannot be loaded", 0),
    (["ckpt_path={bad}"], "cannot be loaded", 0),
    (["+data_overrides.batch_size=0"], "data_overrides.batch_size=0", 0),
    (["+data_overrides.batchsize=3"], "did you mean batch_size?", 0),
    (["+data_overrides._target_=litlab.domains.graph.data.SBMDataModule"], "not its class", 0),
]


@pytest.mark.parametrize("overrides,expected,fast", EXPORT)
def test_export_refuses(overrides, expected, fast, ckpts, tmp_path):
    with_ckpt = (
        overrides
        if any(o.startswith("ckpt_path") for o in overrides)
        else [
            "ckpt_path={digits}",
            *overrides,
        ]
    )
    check("export", export, with_ckpt, expected, fast, ckpts, tmp_path)


def test_export_without_checkpoint_is_one_line(ckpts, tmp_path):
    check("export", export, [], "ckpt_path is required: add ckpt_path=", 1, ckpts, tmp_path)


SERVE = [
    (["max_batch=0"], "max_batch=0 has the wrong type or value; valid: an integer >= 1", 1),
    (["max_batch=-5"], "max_batch=-5", 1),
    (["max_body_bytes=-1"], "max_body_bytes=-1", 1),
    (["workers=0"], "workers=0", 1),
    (["threads=0"], "threads=0", 1),
    (["port=99999"], "port=99999 has the wrong type or value; valid: an integer >= 1", 1),
    (["port=0"], "port=0", 1),
    (["port=abc"], "port=abc", 1),
    (["host=999.1.1.1"], "host=999.1.1.1 is not an IP address", 1),
    (["host=no-such-host.invalid"], "not an IP address or a known host name", 1),
    (["host=192.0.2.1"], "cannot be bound", 1),
    (["log_level=loud"], "log_level=loud", 1),
    (["batching=maybe"], "batching=maybe has the wrong type or value; valid: true or false", 1),
    (["max_wait_ms=-1"], "max_wait_ms=-1", 1),
    (["+foo=1"], "unknown key foo", 1),
    (["model_path={notes}"], "expected a .onnx or a .ckpt file", 1),
    (["model_path=/no/model.onnx"], "is not a file", 1),
    (["model_path={bad}"], "cannot be loaded", 0),
]


@pytest.mark.parametrize("overrides,expected,fast", SERVE)
def test_serve_refuses(overrides, expected, fast, ckpts, tmp_path):
    with_model = (
        overrides
        if any(o.startswith("model_path") for o in overrides)
        else [
            "model_path={digits}",
            *overrides,
        ]
    )
    check("serve", serve, with_model, expected, fast, ckpts, tmp_path)


def test_serve_refuses_a_port_in_use_and_a_missing_model(ckpts, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        check("serve", serve, ["model_path={digits}", f"port={port}"], "is in use", 1, ckpts,
              tmp_path)  # fmt: skip
    check("serve", serve, [], "model_path is required", 1, ckpts, tmp_path)


COMPRESS = [
    (["compress.prune.steps=0"], "compress.prune.steps=0", 1),
    (["compress.prune.lr=-1"], "compress.prune.lr=-1", 1),
    (["compress.prune.round_to=0"], "compress.prune.round_to=0", 1),
    (["compress.prune.ratio=1"], "a share of the parameters to keep in (0, 1)", 1),
    (["compress.prune.method=foo"], "valid: structured | unstructured", 1),
    (["compress.prune.importance_norm=3"], "1 (L1) or 2 (L2)", 1),
    (["+compress.prune.foo=1"], "unknown key compress.prune.foo", 1),
    (["report.batch_sizes=[0]"], "report.batch_sizes[0]=0", 1),
    (["report.batch_sizes=[]"], "report.batch_sizes=[]", 1),
    (["compress=distill", "compress.distill.alpha=2"], "compress.distill.alpha=2", 1),
    (["compress=distill", "compress.distill.temperature=0"], "temperature=0", 1),
    (["compress=quantize", "compress.quantize.calibration_batches=0"], "calibration", 1),
    (["compress=[quantize,prune]"], "quantize must be the last step", 1),
    (["seed=-3"], "seed=-3", 1),
    (["trainer.max_epochs=0"], "trainer.max_epochs=0", 1),
    (["compress=distill", "compress.distill.teacher=/no/t.ckpt"], "no such checkpoint", 0),
    (["+data_overrides.batch_size=0"], "data_overrides.batch_size=0", 0),
    (["callbacks.model_checkpoint.monitor=val/nope"], "is not a metric", 0),
    (["compress=quantize", "compress.quantize.max_drop=-1"], "max_drop=-1", 1),
    (["ckpt_path={seg}", "compress=quantize", "compress.quantize.max_drop=1"], "max_drop=1", 1),
    (
        ["ckpt_path={cora}", "compress=distill", "model@compress.distill.student=cnn"],
        "the checkpoint's data is node_classification",
        0,
    ),
    (["compress=distill_graph"], "unknown key compress.distill.student.net.conv", 0),
    (["~trainer"], "trainer is required by src/compress.py (deleted with ~trainer", 1),  # 34
]


@pytest.mark.parametrize("overrides,expected,fast", COMPRESS)
def test_compress_refuses(overrides, expected, fast, ckpts, tmp_path):
    with_ckpt = (
        overrides
        if any(o.startswith("ckpt_path") for o in overrides)
        else [
            "ckpt_path={digits}",
            *overrides,
        ]
    )
    check("compress", compress, with_ckpt, expected, fast, ckpts, tmp_path)


FEDERATE = [
    (["federate.num_clients=0"], "federate.num_clients=0 has the wrong type or value", 1),
    (["federate.rounds=abc"], "federate.rounds=abc", 1),
    (["federate.local_epochs=0"], "federate.local_epochs=0", 1),
    (["federate.alpha=0"], "federate.alpha=0 has the wrong type or value; valid: a number > 0", 1),
    (["federate.fraction=1.5"], "federate.fraction=1.5 has the wrong type or value", 1),
    (["federate.fraction=0.05"], "samples no client of 10 in a round", 1),
    (["federate.topk_ratio=abc"], "federate.topk_ratio=abc", 1),
    (["federate.partition=shards"], "federate.partition=shards has the wrong type or value", 1),
    (["federate.lr_decay=step"], "federate.lr_decay=step", 1),
    (["federate.compression=zip"], "federate.compression=zip has the wrong type or value", 1),
    (["federate.dp.mode=global"], "federate.dp.mode=global", 1),
    (["federate.dp.noise_multiplier=-1"], "federate.dp.noise_multiplier=-1", 1),
    (["federate.dp.delta=1"], "federate.dp.delta=1", 1),
    (
        ["federate.fail_clients=[99]", "federate.num_clients=2"],
        "names client 99; clients are 0 to 1",
        1,
    ),
    (["federate.backend.client_resources.num_cpus=0"], "client_resources.num_cpus=0", 1),
    (["federate.backend.client_resources.num_cpus=4"], "no client could run", 1),
    (["federate.backend.client_resources.num_gpus=1"], "no client could run", 1),
    (
        ["federate.backend.init_args.object_store_memory=1000"],
        "object_store_memory=1000 has the wrong type or value; valid: a number of bytes >= 78643200",
        1,
    ),
    (["+federate.foo=1"], "unknown key federate.foo", 1),
    (["optimized_metric=val/acc"], "optimized_metric=val/acc", 1),
    (["federate/strategy=fedprox", "federate.strategy.proximal_mu=-1"], "proximal_mu=-1", 0),
    (["model=gnn", "data=digits"], "cannot train on data=digits", 1),
    (["model=unet3d", "data=digits"], "cannot train on data=digits", 1),
    # issue 34: a node federate.py builds from, deleted; a float that is not finite
    (["~trainer"], "trainer is required by src/federate.py (deleted with ~trainer", 1),
    (["~model.optimizer"], "model.optimizer is required by src/federate.py", 1),
    (["~federate.strategy"], "federate.strategy is required by src/federate.py", 1),
    (["model.optimizer.lr=inf"], "model.optimizer.lr=inf has the wrong type or value", 1),
    (["federate.alpha=inf"], "federate.alpha=inf has the wrong type or value", 1),
    (
        ["federate.dp.noise_multiplier=nan"],
        "federate.dp.noise_multiplier=nan has the wrong type or value",
        0,
    ),
]


@pytest.mark.parametrize("overrides,expected,fast", FEDERATE)
def test_federate_refuses(overrides, expected, fast, ckpts, tmp_path):
    check("federate", federate, overrides, expected, fast, ckpts, tmp_path)


@pytest.mark.parametrize(
    "script,overrides,line",
    [
        ("export.py", ["ckpt_path=x", "rtol=-1"], "error: rtol=-1 has the wrong type"),
        ("serve.py", ["model_path=x.onnx", "port=99999"], "error: port=99999 has the wrong"),
        ("compress.py", ["ckpt_path=x", "compress.prune.steps=0"], "error: compress.prune.st"),
        ("federate.py", ["federate.fail_clients=[3]", "federate.num_clients=2"], "error: fed"),
    ],
)
def test_commands_exit_2_with_one_line_and_no_run_dir(script, overrides, line, tmp_path):
    proc = subprocess.run(
        [sys.executable, f"src/{script}", f"paths.log_dir={tmp_path}", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""
    assert not list(tmp_path.glob("*/runs/*")), "a run dir was left behind"


def test_a_corrupt_study_database_is_one_line(tmp_path):
    from litlab.errors import UserError
    from litlab.sweeps.optuna_search import storage_for

    corrupt = tmp_path / "study.db"
    corrupt.write_text("not a database " * 300)
    with pytest.raises(UserError) as err:
        storage_for(f"sqlite:///{corrupt}", tmp_path, None)
    assert "hydra.sweeper.storage=" in str(err.value) and "file is not a database" in str(err.value)
    assert "\n" not in str(err.value) and "sqlalche.me" not in str(err.value)
