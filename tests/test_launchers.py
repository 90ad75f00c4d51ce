"""Hydra launchers and DDP start methods give the results of one plain process: the same tiny
digits jobs under `hydra/launcher=submitit_local`, `hydra/launcher=joblib` and
`hydra/launcher=parallel` (each job in its own process), and `trainer=ddp_spawn`, against the
same jobs trained in this process."""

import csv
import json

import pytest
from helpers.ddp import PROBE, TINY, probe_env
from helpers.runs import QUIET, csv_test_metrics, run_cli, run_dirs

from litlab.config.compose import compose

LRS = (0.01, 0.1)


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dict[float, dict]:
    """The reference: each job's test metrics, trained here with the basic recipe."""
    from litlab.recipes import train_and_test

    out = {}
    for lr in LRS:
        run = tmp_path_factory.mktemp(f"lr{lr}")
        train_and_test(
            compose(
                "train", [*TINY, f"model.optimizer.lr={lr}", "logger=csv", *QUIET], output_dir=run
            )
        )
        out[lr] = csv_test_metrics(run)
    return out


@pytest.mark.xdist_group("launchers")  # one worker builds in_process once (--dist loadgroup)
@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param(name, marks=pytest.mark.slow)
        for name in ("submitit_local", "joblib", "parallel", "parallel+thread")
    ],
)
def test_every_launcher_gives_the_same_results(launcher, in_process, tmp_path):
    """`python src/train.py -m hydra/launcher=NAME model.optimizer.lr=0.01,0.1`: each job runs
    in a process of its own and ends with exactly the in-process metrics; one summary.
    `parallel+thread`: a thread left running in the sweep's process (a Hydra callback's) makes
    the parallel launcher start fresh interpreters instead of forking its jobs."""
    launcher, _, thread = launcher.partition("+")
    extra = ["hydra.launcher.n_jobs=2"] if launcher in ("joblib", "parallel") else []
    if thread:
        extra.append("+hydra.callbacks.thread._target_=helpers.launcher_thread.StartsAThread")
    proc = run_cli(
        "train.py",
        "hydra.mode=MULTIRUN",
        f"hydra/launcher={launcher}",
        *extra,
        "model.optimizer.lr=0.01,0.1",
        *TINY,
        *PROBE,
        f"+callbacks.rank_probe.out={tmp_path / 'probes'}",
        log_dir=tmp_path / "logs",
        env=probe_env(),
        timeout=400,
    )
    [sweep] = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    with open(sweep / "summary.csv") as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["completed", "completed"]
    records = [json.loads(p.read_text()) for p in (tmp_path / "probes").glob("*.json")]
    assert len({r["pid"] for r in records}) == 2, "each job ran in its own process"
    if launcher == "submitit_local":
        assert len([p for p in (sweep / ".submitit").iterdir() if p.name.isdigit()]) == 2
    elif launcher == "joblib":
        assert "Joblib.Parallel(n_jobs=2" in proc.stdout + proc.stderr
    else:
        _ran_at_once(proc.stdout, sweep, records, forked=not thread)
    for job, lr in zip(("0", "1"), LRS):
        assert csv_test_metrics(sweep / job) == in_process[lr], (launcher, lr)


def _ran_at_once(stdout: str, sweep, probes: list[dict], forked: bool) -> None:
    """hydra/launcher=parallel: both jobs' processes ran at the same time, one thread each (the
    suite's OMP_NUM_THREADS=1), on ports of their own, with the code snapshot (which their
    provenance names); one console line per job start (saying whether the job was forked from
    the launcher) and end, each job's own output in its run dir."""
    for job, lr in zip(("0", "1"), LRS):
        assert f"job #{job} started: model.optimizer.lr={lr} (1 core" in stdout
        assert (f"job #{job} started: model.optimizer.lr={lr} (1 core, forked)" in stdout) is forked
        code = json.loads((sweep / job / "provenance.json").read_text())["code"]
        assert code["snapshot"].startswith(str(sweep / "code"))
        assert f"job #{job} completed in " in stdout
        assert "Results" in (sweep / job / "console.log").read_text()
    assert "Results" not in stdout  # the jobs' own lines are in their run dirs
    started = max(stdout.index(f"job #{job} started") for job in ("0", "1"))
    assert started < min(stdout.index(f"job #{job} completed") for job in ("0", "1"))
    assert [p["threads"] for p in probes] == [1, 1]
    assert len({p["master_port"] for p in probes}) == 2
    assert [p.name for p in (sweep / "code").iterdir()]  # the sweep's code (snapshot.take)


@pytest.mark.slow
def test_ddp_spawn_metrics_equal_single_process(tmp_path):
    """`trainer=ddp_spawn`: 2 spawned CPU processes, one run dir, and its checkpoint tested by
    one process gives the metrics the spawned ranks logged (synced, unpadded)."""
    from litlab.recipes import train_and_test

    run_cli("train.py", "trainer=ddp_spawn", *TINY, log_dir=tmp_path / "ddp", timeout=600)
    [run] = run_dirs(tmp_path / "ddp")
    ckpt = run / "checkpoints" / "epoch_000.ckpt"
    assert ckpt.is_file()
    train_and_test(
        compose(
            "train",
            ["train=false", f"ckpt_path={ckpt}", "trainer.accelerator=cpu", "logger=csv", *QUIET],
            output_dir=tmp_path / "single",
        )
    )
    ddp, single = csv_test_metrics(run), csv_test_metrics(tmp_path / "single")
    assert ddp.keys() == single.keys()
    for key in ddp:
        assert ddp[key] == pytest.approx(single[key], rel=1e-5, abs=1e-6), key
