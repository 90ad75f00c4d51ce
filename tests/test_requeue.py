"""SLURM preemption and requeue, simulated: the job's environment (SLURM_JOB_ID, and
SLURM_RESTART_COUNT on the requeue), the signal SLURM sends (SIGUSR1 before the time limit with
`--signal=USR1@120`, SIGTERM on preemption), a fake `scontrol` on PATH that records the requeue.
The same command started again with the same job id resumes in the same run dir, from its
last.ckpt, under the same W&B (offline) and MLflow runs."""

import os
import stat

import pytest
from helpers.ddp import TESTS
from helpers.requeue import RUN, val_epochs
from helpers.runs import run_cli

JOB = "4242"
# at the start of the batch after 6 optimizer steps: epoch 1, its 3rd batch
FAULT = ["+callbacks.fault._target_=faults.Fault", "+callbacks.fault.step=6"]


def job_env(tmp_path, **extra) -> dict:
    """The job as SLURM starts it, with a fake scontrol that writes its arguments to a file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
        "SLURM_JOB_ID": JOB,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        **extra,
    }


def mlflow_runs(log_dir):
    from mlflow.tracking import MlflowClient

    # LocalMLFlowLogger's SQLite store; one experiment per task
    client = MlflowClient(f"sqlite:///{(log_dir / 'mlflow.db').resolve()}")
    [experiment] = [e for e in client.search_experiments() if e.name == "train"]
    return client.search_runs([experiment.experiment_id])


@pytest.mark.parametrize(
    ("kind", "code"),
    [("sigusr1", 128 + 10), ("sigterm", 143)],
)
@pytest.mark.slow  # ~110 s each on 2 cores (two runs with every logger)
def test_stopped_slurm_job_resumes_in_place_when_requeued(tmp_path, kind, code):
    import torch

    log_dir = tmp_path / "logs"
    first = run_cli(
        "train.py",
        *RUN,
        *FAULT,
        f"+callbacks.fault.kind={kind}",
        log_dir=log_dir,
        env=job_env(tmp_path),
        check=False,
    )
    assert first.returncode == code, first.stdout[-2000:] + first.stderr[-3000:]
    run = log_dir / "train" / "runs" / f"slurm-{JOB}"
    assert sorted((log_dir / "train" / "runs").iterdir()) == [run]
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert (last["epoch"], last["global_step"]) == (1, 7)  # the batch it was in finished
    requeued = (tmp_path / "scontrol.log").read_text().split() if kind == "sigusr1" else []
    assert requeued == (["requeue", JOB] if kind == "sigusr1" else [])  # SIGTERM: SLURM's own
    wandb_id = (run / "wandb_run_id.txt").read_text().strip()
    mlflow_id = (run / "mlflow_run_id.txt").read_text().strip()

    # the requeued job: same id and command, SLURM_RESTART_COUNT=1, no ckpt_path
    again = run_cli(
        "train.py",
        *RUN,
        *FAULT,
        f"+callbacks.fault.kind={kind}",
        log_dir=log_dir,
        env=job_env(tmp_path, SLURM_RESTART_COUNT="1"),
    )
    assert f"slurm-{JOB} (restart 1): resuming {run} from last.ckpt" in again.stdout
    assert sorted((log_dir / "train" / "runs").iterdir()) == [run]  # the same run dir
    assert val_epochs(run) == [0, 1, 2]  # epochs 0 and 1 were not trained again
    final = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert final["global_step"] == 12 and (run / "metrics.json").is_file()
    assert (run / "wandb_run_id.txt").read_text().strip() == wandb_id
    offline = sorted(p.name for p in (run / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(name.endswith(f"-{wandb_id}") for name in offline)
    [mlflow_run] = mlflow_runs(log_dir)  # one MLflow run, continued
    assert mlflow_run.info.run_id == mlflow_id and mlflow_run.info.status == "FINISHED"
    assert "test/acc" in mlflow_run.data.metrics and "val/acc" in mlflow_run.data.metrics
    assert list((run / ".hydra").glob("resume-*"))  # the requeued job's config, beside the first


def test_a_finished_job_is_not_continued_by_a_later_run_of_the_same_id(tmp_path, monkeypatch):
    """A second run in the same allocation (salloc) starts anew once the first has finished;
    another job id never takes a run over."""
    from litlab.checkpointing import resume

    for key in ("SUBMITIT_LOCAL_JOB_ID", "TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    job_dir = tmp_path / "train" / "runs" / "slurm-77"
    assert resume.job_run_dir(tmp_path, "train") == job_dir
    (job_dir / "checkpoints").mkdir(parents=True)
    (job_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    resume.mark_job(job_dir)
    assert resume.requeued_checkpoint(job_dir) == job_dir / "checkpoints" / "last.ckpt"
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    assert resume.requeued_checkpoint(job_dir) is None
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    (job_dir / "metrics.json").write_text("{}")  # finished
    assert resume.job_run_dir(tmp_path, "train") is None
    assert resume.requeued_checkpoint(job_dir) is None
