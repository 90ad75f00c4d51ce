"""trainer=ddp as users type it: real 2-process gloo runs on the CPU, started as subprocesses
(Lightning re-executes src/train.py for rank 1). Launches are few and tiny: each one costs two
interpreter starts, so one multirun carries most assertions."""

import json
import re

import pytest
from helpers.ddp import PROBE, TINY, probe_env
from helpers.runs import QUIET, ROOT, csv_test_metrics, run_cli

from litlab.config.compose import compose

# 361 test and 145 val digits: shards padded to equal sizes would count duplicates
ODD_SPLITS = ["data.test_fraction=0.2006", "data.val_fraction=0.1007"]
# the tests of one ddp_sweep run on one worker, so it is built once (--dist loadgroup)
SWEEP = pytest.mark.xdist_group("ddp_sweep")


@pytest.fixture(scope="module")
def ddp_sweep(tmp_path_factory):
    """`train.py -m trainer=ddp model.optimizer.lr=0.01,0.1`: 2 jobs x 2 ranks."""
    tmp = tmp_path_factory.mktemp("ddp_sweep")
    probes = tmp / "probes"
    proc = run_cli(
        "train.py",
        "hydra.mode=MULTIRUN",
        "trainer=ddp",
        "model.optimizer.lr=0.01,0.1",
        "trainer.accumulate_grad_batches=2",
        "trainer.gradient_clip_val=1.0",
        *TINY,
        *ODD_SPLITS,
        *PROBE,
        f"+callbacks.rank_probe.out={probes}",
        log_dir=tmp / "logs",
        env=probe_env(),
        timeout=400,
    )
    return proc, tmp / "logs", probes


@SWEEP
def test_multirun_ddp_gives_one_dir_per_job_and_identical_rank_params(ddp_sweep):
    proc, logs, probes = ddp_sweep
    sweeps = list((logs / "train" / "multiruns").iterdir())
    assert len(sweeps) == 1 and not (logs / "train" / "runs").exists()  # no per-rank dirs
    jobs = sorted(p for p in sweeps[0].iterdir() if p.is_dir())
    assert [j.name for j in jobs] == ["0", "1"]

    records = [json.loads(p.read_text()) for p in probes.glob("*.json")]
    assert len(records) == 4  # 2 jobs x 2 ranks, and no rank re-ran the sweep
    by_dir: dict[str, list] = {}
    for r in records:
        by_dir.setdefault(r["root_dir"], []).append(r)
    assert sorted(by_dir) == [str(j.resolve()) for j in jobs]
    lrs = []
    for job_records in by_dir.values():
        assert sorted(r["rank"] for r in job_records) == [0, 1]
        assert {r["world_size"] for r in job_records} == {2}
        assert len({r["lr"] for r in job_records}) == 1  # both ranks train the same lr
        lrs.append(job_records[0]["lr"])
    assert sorted(lrs) == [0.01, 0.1]

    for job in jobs:  # files come from rank 0 only, the parent's .hydra is kept
        assert sorted(p.name for p in (job / "checkpoints").iterdir()) == [
            "epoch_000.ckpt",
            "last.ckpt",
        ]
        assert "trainer=ddp" in (job / ".hydra" / "overrides.yaml").read_text()
        assert set(csv_test_metrics(job)) == {"test/acc", "test/f1", "test/loss"}  # values: below

    console = proc.stdout + proc.stderr
    logs = "".join((job / "train.log").read_text() for job in jobs)  # INFO lines: the log file
    assert logs.count("Instantiating datamodule") == 2  # once per job, not per rank
    assert console.count("Results") == 2
    assert not re.search(r"\[rank1\].*\[INFO\]", console)  # rank 1 prints warnings/errors only
    assert "[rank0]" in console
    assert "2 processes x batch_size 64 x accumulate_grad_batches 2 = 256 samples" in console
    assert "terminate called" not in console and "Traceback" not in console
    # torchmetrics already synced the epoch metrics: no advice per metric to sync them again
    assert "sync_dist" not in console
    # the launch lines without the job's environment (its train.log says it), no notice of
    # fewer batches than log_every_n_steps
    assert "env_set" not in console and "logging interval" not in console
    assert logs.count("launched with ++hydra.job.env_set.LITLAB_SWEEP_RESUME=1") == 2


@SWEEP
@pytest.mark.parametrize("job", ["0", "1"])
def test_ddp_test_metrics_equal_single_process(ddp_sweep, tmp_path, job):
    """Same weights (each job's checkpoint), same split: the DDP job's test metrics equal one
    process's (here, in process), exactly for counts (no duplicates from sampler padding)."""
    from litlab.recipes import train_and_test

    _, logs, _ = ddp_sweep
    run = next((logs / "train" / "multiruns").iterdir()) / job
    ddp = csv_test_metrics(run)
    train_and_test(
        compose(
            "train",
            [
                "train=false",
                f"ckpt_path={run / 'checkpoints' / 'epoch_000.ckpt'}",
                "trainer.accelerator=cpu",
                "logger=csv",
                *ODD_SPLITS,
                *QUIET,
            ],
            output_dir=tmp_path,
        )
    )
    single = csv_test_metrics(tmp_path)
    assert ddp["test/acc"] == single["test/acc"] and ddp["test/f1"] == single["test/f1"]
    assert ddp["test/loss"] == pytest.approx(single["test/loss"], rel=1e-5)


def test_eval_shards_are_unpadded():
    """The sampler behind the equality above: val/test shards cover each sample once."""
    from lightning.pytorch.trainer.connectors import data_connector
    from lightning.pytorch.trainer.states import RunningStage
    from torch.utils.data import DataLoader

    from litlab.utils import distributed

    distributed.unpad_eval_shards()  # what LitModule.setup does in every process

    def shards(dataset, mode) -> list[list[int]]:
        loader = DataLoader(dataset, batch_size=64)
        return [
            list(
                data_connector._get_distributed_sampler(
                    loader, shuffle=False, overfit_batches=0, mode=mode, num_replicas=2, rank=r
                )
            )
            for r in (0, 1)
        ]

    rank0, rank1 = shards(list(range(361)), RunningStage.TESTING)
    assert sorted(rank0 + rank1) == list(range(361))
    # fewer samples than ranks: every rank gets one
    assert shards([0], RunningStage.VALIDATING) == [[0], [0]]


def test_only_metrics_synced_by_torchmetrics_lose_lightnings_sync_dist_advice():
    """Lightning's advice, as its logger connector words it, is dropped for the epoch values
    litlab computed with torchmetrics (synced already) and kept for any other name, e.g. a
    value a user logs unsynced in their own module."""
    import warnings

    from lightning.pytorch.utilities.warnings import PossibleUserWarning

    from litlab.utils.distributed import synced_by_torchmetrics

    def advice(name: str) -> str:
        return (
            f"It is recommended to use `self.log({name!r}, ..., sync_dist=True)` when logging on "
            "epoch level in distributed setting to accumulate the metric across devices."
        )

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        synced_by_torchmetrics({"val/acc": 1, "val/loss": 2})
        for name in ("val/acc", "val/loss", "val/acc_mine", "val/mine", "train/acc"):
            warnings.warn(advice(name), PossibleUserWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == [
        advice(n) for n in ("val/acc_mine", "val/mine", "train/acc")
    ]


DOMAINS = [  # the slow stage's: make test's DDP check is the 2 x 2-rank sweep (ddp_sweep)
    pytest.param(["model=gnn"], id="graph", marks=pytest.mark.slow),
    pytest.param(["model=unet3d"], id="3d-segmentation", marks=pytest.mark.slow),
    pytest.param(["model=resnet3d"], id="3d-classification", marks=pytest.mark.slow),
    pytest.param(["experiment=diabetes"], id="regression", marks=pytest.mark.slow),
    pytest.param(  # a mask folder written by the test ({masks}); items are sharded whole
        [
            "model=unet2d",
            "data=masks",
            "data.root={masks}",
            "data.num_classes=3",
            "data.image_size=32",
        ],
        id="2d-segmentation",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.parametrize("domain", DOMAINS)
def test_ddp_per_domain_metrics_equal_single_process(domain, tmp_path):
    """`train.py <domain> trainer=ddp` as typed, then its checkpoint tested by one process
    (this one: no second interpreter start)."""
    from helpers.masks import mask_folder

    from litlab.recipes import train_and_test

    masks = mask_folder(tmp_path / "masks", count=20) if "data=masks" in domain else None
    domain = [o.format(masks=masks) for o in domain]
    proc = run_cli("train.py", *domain, "trainer=ddp", *TINY, log_dir=tmp_path / "ddp")
    assert "sync_dist" not in proc.stdout + proc.stderr  # metrics synced by torchmetrics
    ddp_dir = sorted((tmp_path / "ddp").glob("*/runs/*"))  # experiment=diabetes: diabetes/
    assert len(ddp_dir) == 1  # one run dir, not one per rank
    ckpt = ddp_dir[0] / "checkpoints" / "epoch_000.ckpt"
    overrides = [*domain, "train=false", f"ckpt_path={ckpt}", "trainer.accelerator=cpu"]
    train_and_test(compose("train", [*overrides, *QUIET], output_dir=tmp_path / "single"))
    ddp, single = csv_test_metrics(ddp_dir[0]), csv_test_metrics(tmp_path / "single")
    assert ddp.keys() == single.keys()
    for key in ddp:
        assert ddp[key] == pytest.approx(single[key], rel=1e-5, abs=1e-6), key


def test_slurm_launcher_config_composes(tmp_path):
    """hydra/launcher=slurm resolves to submitit's SLURM launcher with the project's defaults."""
    from litlab.config.compose import compose

    cfg = compose("train", ["hydra/launcher=slurm", "trainer=ddp"], output_dir=tmp_path)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == 1 and launcher.timeout_min == 240


@pytest.mark.slow
def test_gpu_bench_runs_its_cpu_row_and_skips_cuda_cleanly():
    """bench/gpu.py, the script run on lent GPUs: on a CPU it must still exit 0 with a table."""
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs the full bench/gpu.py, not this check")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| cnn | cpu fp32 | ok |" in proc.stdout
    assert "FAILED" not in proc.stdout
    assert proc.stdout.count("| cpu fp32 | ok |") == 4  # cnn, gnn, unet3d, resnet3d
    assert proc.stdout.count("skipped: no CUDA device") == 8 * 4  # 7 GPU settings + TensorRT


@pytest.mark.parametrize(
    ("trainer", "env", "expected"),
    [
        (
            {"strategy": {"_target_": "lightning.pytorch.strategies.DDPStrategy"}, "devices": 2},
            {},
            2,
        ),
        ({"strategy": "ddp", "devices": [0, 1, 2]}, {}, 3),
        ({"strategy": "ddp", "devices": "0,1"}, {}, 2),
        ({"strategy": "ddp", "devices": 2, "num_nodes": 2}, {}, 0),  # multi-node: Lightning
        ({"strategy": "ddp", "devices": 2}, {"LOCAL_RANK": "1"}, 0),  # a child rank
        ({"strategy": "ddp", "devices": 2}, {"SLURM_NTASKS": "4"}, 0),  # the cluster starts them
        ({"strategy": "ddp", "devices": 2}, {"TORCHELASTIC_RUN_ID": "x"}, 0),  # torchrun
        (
            {
                "strategy": {
                    "_target_": "lightning.pytorch.strategies.DDPStrategy",
                    "start_method": "spawn",
                },
                "devices": 2,
            },
            {},
            0,
        ),
        ({"strategy": "fsdp", "devices": 2}, {}, 0),
        ({"strategy": "auto", "devices": 1}, {}, 0),
    ],
)
def test_which_ddp_runs_start_their_ranks_early(trainer, env, expected, monkeypatch):
    """trainer=ddp on one node starts its ranks with the job; everything else is left to
    Lightning or to the cluster (see litlab.runs.ddp.early_ranks)."""
    from omegaconf import OmegaConf

    from litlab.runs.ddp import STARTED_ELSEWHERE, ddp_processes

    for key in STARTED_ELSEWHERE:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert ddp_processes(OmegaConf.create(trainer)) == expected


def test_unreachable_rendezvous_address_is_one_line_not_a_30_minute_wait():
    """With no usable interface for MASTER_ADDR (loopback down, a foreign address) the ranks
    could never meet: a UserError at once instead of Lightning's rendezvous timeout."""
    from litlab.errors import UserError
    from litlab.runs.ddp import _check_reachable

    _check_reachable("127.0.0.1")  # the normal case passes
    with pytest.raises(UserError, match="cannot reach each other at 192.0.2.1"):
        _check_reachable("192.0.2.1")  # TEST-NET-1: no interface of this machine has it


def _meeting(tmp_path, **procs):
    """Rank 0's and rank 1's sides of a one-machine job's start (litlab.runs.ddp)."""
    from litlab.runs.ddp import Start

    return Start(tmp_path, 0, {int(r[1:]): p for r, p in procs.items()}), Start(tmp_path, 1)


def test_a_local_rank_that_starts_slowly_is_waited_for_past_the_timeout(tmp_path):
    """Rank 1 of this machine alive (its heartbeat) but still starting 3.5 s later, beyond
    ddp_join_timeout=1.5: rank 0 waits for it (says so once, in terms of one machine) and
    returns when it is ready, instead of giving up at 1.5 s."""
    import threading
    import time

    rank0, rank1 = _meeting(tmp_path)
    rank1.begin(1.5)
    arrives = threading.Timer(3.5, rank1.wait, (2, 1.5, print))  # rank 0 is ready by then
    arrives.start()
    said: list[str] = []
    start = time.monotonic()
    rank0.wait(2, 1.5, said.append)
    assert time.monotonic() - start >= 3.4
    arrives.join()
    assert len(said) == 1 and said[0].startswith(
        "DDP rank 0 of 2: waiting for rank(s) 1 of this machine, still starting"
    )
    assert "ddp_join_timeout=1.5 s after a rank's last sign of life" in said[0]


def test_a_local_rank_without_signs_of_life_stops_the_wait_in_one_line(tmp_path):
    """Rank 1's heartbeat stops (a stopped or stuck process) before it is ready: after
    ddp_join_timeout without a sign of life, one line that fits one machine (not "start
    the command on every node") and names the setting to raise."""
    import time

    from litlab.runs.ddp_join import JoinFailed

    rank0, rank1 = _meeting(tmp_path)
    rank1.begin(1.0)
    time.sleep(0.5)
    rank1.stop()  # alive until now, never ready
    start = time.monotonic()
    with pytest.raises(JoinFailed) as failed:
        rank0.wait(2, 1.0, lambda line: None)
    assert 0.3 < time.monotonic() - start < 5
    message = str(failed.value)
    assert message.startswith("DDP rank 0 of 2: rank 1 on this machine showed no sign of life")
    assert "raise ddp_join_timeout (now 1 s)" in message
    assert "node" not in message and "\n" not in message


def test_a_local_rank_alive_but_stuck_in_its_start_ends_the_wait_at_the_limit(tmp_path):
    """Rank 1's heartbeat goes on but it never gets ready (a deadlock in its start): the wait
    that follows living ranks ends at the start's limit, in one line, not never."""
    import time

    from litlab.runs.ddp_join import JoinFailed

    rank0, rank1 = _meeting(tmp_path)
    rank0.limit_s = 2.0  # START_LIMIT_S is an hour
    rank1.begin(1.0)
    try:
        with pytest.raises(JoinFailed) as failed:
            rank0.wait(2, 1.0, lambda line: None)
    finally:
        rank1.stop()
    assert 2.0 <= time.time() - rank0.begun < 10
    message = str(failed.value)
    assert message.startswith("DDP rank 0 of 2: rank(s) 1 of this machine still alive but not")
    assert "past the 2 s a start may take" in message and "\n" not in message


def test_a_local_rank_that_exits_before_the_join_ends_the_wait_at_once(tmp_path):
    """A child rank that failed while starting (its own error is on the console): rank 0
    says so at once with its exit code, not after ddp_join_timeout."""
    import subprocess
    import sys
    import time

    from litlab.runs.ddp_join import JoinFailed

    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    rank0, _ = _meeting(tmp_path, r1=proc)
    start = time.monotonic()
    with pytest.raises(JoinFailed, match=r"^DDP rank 0 of 2: rank 1 on this machine stopped "):
        rank0.wait(2, 300.0, lambda line: None)
    assert time.monotonic() - start < 5


SLOW_RANK = """
import os, sys, time

class SlowTorch:  # rank 1 of trainer=ddp imports torch SLOW_RANK_S seconds late
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            time.sleep(float(os.environ["SLOW_RANK_S"]))
        return None

if os.environ.get("LOCAL_RANK") == "1" and "SLOW_RANK_S" in os.environ:
    sys.meta_path.insert(0, SlowTorch())
"""


@pytest.mark.slow  # two interpreter starts, one of them 15 s late
def test_ddp_on_one_machine_waits_for_a_rank_slower_than_the_join_timeout(tmp_path):
    """`train.py trainer=ddp ddp_join_timeout=3` whose rank 1 is still importing torch 15 s
    after rank 0 is ready (as on a loaded machine): the job waits for it and finishes, with
    one line that says what it waits for on this machine."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_RANK)
    env = {"PYTHONPATH": str(tmp_path / "site"), "SLOW_RANK_S": "15"}
    proc = run_cli(
        "train.py", "trainer=ddp", "ddp_join_timeout=3", *TINY, log_dir=tmp_path, env=env
    )
    waiting = [line for line in proc.stderr.splitlines() if "waiting for" in line]
    assert len(waiting) == 1 and waiting[0].startswith(
        "DDP rank 0 of 2: waiting for rank(s) 1 of this machine, still starting"
    ), proc.stderr[-3000:]
    assert "node" not in proc.stderr
    assert set(csv_test_metrics(next((tmp_path / "train" / "runs").iterdir()))) == {
        "test/acc",
        "test/f1",
        "test/loss",
    }
