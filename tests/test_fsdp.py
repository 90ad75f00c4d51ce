"""trainer=fsdp on the CPU: 2 processes over gloo, torch's FSDP2 through Lightning's
ModelParallelStrategy (torch 2.14's FSDP1 refuses a CPU: litlab/config/build.py). It
trains, stops on SIGTERM with last.ckpt, resumes to the same result as an uninterrupted run,
and its one-file checkpoint tests alike in one process (eval.py, load_run)."""

import csv

import pytest
from helpers.ddp import probe_env
from helpers.runs import QUIET, csv_test_metrics, run_cli, run_dirs

from litlab.config.compose import compose

FSDP = [
    "trainer=fsdp",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.num_sanity_val_steps=0",
    "threads=1",
]


def test_fsdp_on_a_cpu_is_fsdp2_over_two_gloo_processes(tmp_path):
    """What trainer=fsdp builds here (no GPU): ModelParallelStrategy, 2 data-parallel shards,
    fp32, whole-file checkpoints; the GPU route keeps Lightning's FSDPStrategy."""
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

    from litlab.config import build

    cfg = compose("train", ["trainer=fsdp", *QUIET], output_dir=tmp_path)
    assert cfg.trainer.devices == 2 and cfg.trainer.precision == "32-true"
    strategy = build.instantiate_all({"s": cfg.trainer.strategy}, "trainer")[0]
    assert isinstance(strategy, ModelParallelStrategy)
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (2, 1)
    assert not strategy._save_distributed_checkpoint
    assert isinstance(build.fsdp(accelerator="gpu"), FSDPStrategy)


def val_rows(run) -> list[int]:
    with open(run / "csv" / "metrics.csv") as f:
        return [int(float(r["epoch"])) for r in csv.DictReader(f) if r.get("val/acc")]


@pytest.mark.slow  # three 2-process runs: ~4-6 min on 2 loaded cores
def test_fsdp_on_cpu_trains_stops_and_resumes_like_an_uninterrupted_run(tmp_path):
    from litlab.recipes import train_and_test

    env = {**probe_env(), "OMP_NUM_THREADS": "1"}
    run_cli("train.py", *FSDP, log_dir=tmp_path / "whole", env=env, timeout=600)
    [whole] = run_dirs(tmp_path / "whole")

    # SIGTERM to rank 0 on the epoch's last batch (Lightning forwards it to the rank it
    # started); the epoch ends with its validation and last.ckpt, then the run stops
    fault = ["+callbacks.fault._target_=faults.Fault", "+callbacks.fault.step=2"]
    stopped = run_cli(
        "train.py",
        *FSDP,
        *fault,
        "+callbacks.fault.kind=sigterm",
        log_dir=tmp_path / "cut",
        env=env,
        timeout=600,
        check=False,
    )
    assert stopped.returncode == 143, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    [cut] = run_dirs(tmp_path / "cut")
    assert (cut / "checkpoints" / "last.ckpt").is_file()
    run_cli("train.py", *FSDP, f"ckpt_path={cut}", log_dir=tmp_path / "cut", env=env, timeout=600)
    assert run_dirs(tmp_path / "cut") == [cut] and val_rows(cut) == [0, 1]
    resumed, uninterrupted = csv_test_metrics(cut), csv_test_metrics(whole)
    for key in uninterrupted:
        assert resumed[key] == pytest.approx(uninterrupted[key], rel=1e-6), key

    # its whole-file checkpoint, tested by one process: the metrics the 2 shards logged
    best = whole / "checkpoints" / "epoch_001.ckpt"
    overrides = ["train=false", f"ckpt_path={best}", "trainer=cpu", "threads=1"]
    train_and_test(compose("train", [*overrides, *QUIET], output_dir=tmp_path / "single"))
    single = csv_test_metrics(tmp_path / "single")
    for key in uninterrupted:
        assert single[key] == pytest.approx(uninterrupted[key], rel=1e-5, abs=1e-6), key
