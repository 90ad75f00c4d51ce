"""Jobs run the code they were submitted with, and a preempted job is resubmitted the way
SLURM would: `hydra/launcher=slurm_local` (the SLURM launcher's local stand-in) snapshots src/
and configs/ into the sweep dir and its jobs import that copy; a job stopped by submitit's
preemption signal (SIGUSR2) writes last.ckpt, is requeued through the launcher's checkpoint
hook and resumes in its own job dir. Every run dir records its provenance."""

import csv
import json

import pytest
from helpers.ddp import PROBE, probe_env
from helpers.requeue import RUN, val_epochs
from helpers.runs import ROOT, run_cli


@pytest.mark.slow  # ~2 min on 2 cores: a job, its requeue, the submitit controller
def test_sweep_jobs_run_their_snapshot_and_resume_after_preemption(tmp_path):
    log_dir = tmp_path / "logs"
    run_cli(
        "train.py",
        "hydra.mode=MULTIRUN",
        "hydra/launcher=slurm_local",
        "model.optimizer.lr=0.01",
        *RUN[1:],  # csv logger only
        "+callbacks.fault._target_=faults.Fault",
        "+callbacks.fault.step=6",
        "+callbacks.fault.kind=sigusr2",
        *PROBE,
        f"+callbacks.rank_probe.out={tmp_path / 'probes'}",
        log_dir=log_dir,
        env=probe_env(),
        timeout=600,
    )
    [sweep] = (log_dir / "train" / "multiruns").iterdir()
    [snapshot] = (sweep / "code").iterdir()
    code = json.loads((snapshot / "CODE.json").read_text())
    assert code["project_root"] == str(ROOT) and code["tree_sha256"].startswith(snapshot.name)
    assert (snapshot / "src" / "litlab" / "recipes.py").is_file()
    assert (snapshot / "configs" / "train.yaml").is_file()

    records = [json.loads(p.read_text()) for p in (tmp_path / "probes").glob("*.json")]
    assert len(records) == 2, "the job ran, was preempted, and ran again"
    assert len({r["pid"] for r in records}) == 2
    assert all(r["litlab"].startswith(str(snapshot / "src")) for r in records)  # the snapshot
    job = sweep / "0"
    assert {r["root_dir"] for r in records} == {str(job.resolve())}  # in its own job dir
    assert val_epochs(job) == [0, 1, 2]  # resumed, not retrained
    assert (job / "metrics.json").is_file()
    with open(sweep / "summary.csv") as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["completed"]
    provenance = json.loads((job / "provenance.json").read_text())
    assert provenance["code"]["snapshot"] == str(snapshot)
    assert provenance["code"]["commit"] == code["commit"]
    assert provenance["packages"]["torch"] and provenance["packages"]["lightning"]


@pytest.mark.xdist_group("digits_run")  # with the other users of the shared run
def test_every_run_dir_records_commit_versions_and_data(digits_run):
    """provenance.json of the default run: the commit and diff state, the package versions,
    the checksum of the data it read; its checkpoints carry the code state."""
    import hashlib
    import subprocess

    import torch

    from litlab.checkpointing import run_config as provenance

    record = json.loads((digits_run.run / "provenance.json").read_text())
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if head:
        assert record["code"]["commit"] == head
        assert isinstance(record["code"]["dirty"], bool)
    assert len(record["code"]["tree_sha256"]) == 64
    assert record["packages"]["torch"] == torch.__version__.split("+")[0]
    [(path, digest)] = record["data"].items()
    assert path.endswith("digits.csv.gz")
    with open(path, "rb") as f:
        assert digest == hashlib.sha256(f.read()).hexdigest()
    ckpt = torch.load(digits_run.best, weights_only=True, map_location="cpu")
    assert ckpt[provenance.KEY]["code"] == record["code"]
    assert provenance.code_note(ckpt[provenance.KEY]) is None  # the same code evaluates it


@pytest.mark.slow  # make test's 5 minutes (343 s on the final tree of 2026-12-02): the slow stage runs it
@pytest.mark.xdist_group("digits_run")
def test_eval_says_in_one_line_when_the_code_differs(tmp_path, digits_run):
    """A checkpoint whose recorded code is not this code: eval.py says so once, and runs."""
    import torch

    from litlab.checkpointing import run_config as provenance

    ckpt = torch.load(digits_run.best, weights_only=True, map_location="cpu")
    ckpt[provenance.KEY]["code"].update(commit="0123456789abcdef", tree_sha256="f" * 64)
    torch.save(ckpt, tmp_path / "older.ckpt")
    proc = run_cli("eval.py", f"ckpt_path={tmp_path / 'older.ckpt'}", log_dir=tmp_path / "logs")
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: this code")]
    assert len(notes) == 1 and "trained with 0123456789ab" in notes[0], proc.stdout[-2000:]
