"""Multi-node DDP without a cluster: two "nodes" on this machine over loopback, gloo on the CPU,
started as docs/scale.md tells a cluster to start them: torchrun (as on any machines, and in a
Kubernetes PyTorchJob) and SLURM's srun (simulated: the environment srun gives each task).
One run dir, files from global rank 0 only, test metrics equal to the 1-node 2-process run's,
a node that dies ends the other one with one line, not a hang, and a node whose peers never
start says what it waits for, then stops with one line after ddp_join_timeout."""

import os
import socket
import subprocess
import sys

import pytest
from helpers.ddp import TESTS, TINY
from helpers.runs import ROOT, csv_test_metrics, run_cli, run_dirs

# one intra-op thread per process in both runs: float sums in the same order
SAME = [*TINY, "threads=1", "callbacks.model_summary=null"]
NODE = ["trainer=ddp", "trainer.devices=1", "trainer.num_nodes=2"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_cmd(log_dir, *overrides) -> list[str]:
    return [
        str(ROOT / "src" / "train.py"),
        f"paths.log_dir={log_dir}",
        "extras.print_config=false",
        "callbacks.rich_progress_bar=null",
        *NODE,
        *SAME,
        *overrides,
    ]


def env(**extra) -> dict:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **extra}


def torchrun_nodes(
    log_dir, port: int, *overrides: str, pet: bool = False
) -> list[subprocess.Popen]:
    """`torchrun --nnodes=2 --nproc-per-node=1 --node-rank=N --master-addr=127.0.0.1 ...`
    twice, as two machines would run it (docs/scale.md, "torchrun"); `pet`: the same settings
    as the PET_* variables a Kubernetes PyTorchJob gives each pod, and a bare `torchrun`."""
    procs = []
    for node in (0, 1):
        settings = {
            "nnodes": "2",
            "nproc-per-node": "1",
            "node-rank": str(node),
            "master-addr": "127.0.0.1",
            "master-port": str(port),
            "rdzv-id": "job7",
        }
        flags = [] if pet else [f"--{k}={v}" for k, v in settings.items()]
        pet_env = {f"PET_{k.upper().replace('-', '_')}": v for k, v in settings.items()}
        launcher = [sys.executable, "-m", "torch.distributed.run", *flags]
        procs.append(
            subprocess.Popen(
                [*launcher, *train_cmd(log_dir, *overrides)],
                cwd=ROOT,
                env=env(OMP_NUM_THREADS="1", **(pet_env if pet else {})),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def srun_tasks(log_dir, port: int) -> list[subprocess.Popen]:
    """What `srun` starts for `#SBATCH --nodes=2 --ntasks-per-node=1`: one task per node with
    SLURM's variables, which Lightning's SLURMEnvironment reads (docs/scale.md, "SLURM")."""
    slurm = {
        "SLURM_JOB_ID": "9001",
        "SLURM_JOB_NAME": "train",
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NNODES": "2",
        "SLURM_NODELIST": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }
    return [
        subprocess.Popen(
            [sys.executable, *train_cmd(log_dir)],
            cwd=ROOT,
            env=env(**slurm, SLURM_PROCID=str(r), SLURM_LOCALID="0", SLURM_NODEID=str(r)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (0, 1)
    ]


def finish(procs, timeout=420) -> list[str]:
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    """The reference: `train.py trainer=ddp` (1 node, 2 processes), its test metrics."""
    log_dir = tmp_path_factory.mktemp("one_node")
    run_cli("train.py", "trainer=ddp", *SAME, log_dir=log_dir, env={"OMP_NUM_THREADS": "1"})
    [run] = (log_dir / "train" / "runs").iterdir()
    return run


def check_one_run(log_dir, name: str, one_node) -> None:
    [run] = (log_dir / "train" / "runs").iterdir()  # both nodes wrote into one run dir
    assert run.name == name
    assert csv_test_metrics(run) == csv_test_metrics(one_node)  # equal, not close
    # checkpoints from global rank 0 only: the same files as the 1-node run
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == sorted(
        p.name for p in (one_node / "checkpoints").iterdir()
    )
    assert (run / "job_id.txt").read_text().strip() == name
    assert not list(run.glob(".hydra/resume-*"))  # node 1 wrote no config of its own


@pytest.mark.slow  # 27 s on 2 cores with its fixture; DDP itself: test_ddp.py in make test
@pytest.mark.xdist_group("multinode")
def test_two_torchrun_nodes_equal_one_node_of_two_processes(tmp_path, one_node):
    log_dir = tmp_path / "logs"
    procs = torchrun_nodes(log_dir, free_port())
    outputs = finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    check_one_run(log_dir, "torchrun-job7", one_node)
    assert outputs[0].count("Results") == 1 and "Results" not in outputs[1]  # rank 0 reports


@pytest.mark.slow
@pytest.mark.xdist_group("multinode")
def test_two_pytorchjob_pods_equal_one_node(tmp_path, one_node):
    """The Kubernetes recipe: a bare `torchrun src/train.py ...` per pod, its settings in the
    PET_* variables that the training operator sets."""
    log_dir = tmp_path / "logs"
    procs = torchrun_nodes(log_dir, free_port(), pet=True)
    outputs = finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    check_one_run(log_dir, "torchrun-job7", one_node)


@pytest.mark.slow
@pytest.mark.xdist_group("multinode")
def test_two_srun_tasks_on_two_nodes_equal_one_node(tmp_path, one_node):
    log_dir = tmp_path / "logs"
    procs = srun_tasks(log_dir, free_port())
    outputs = finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    check_one_run(log_dir, "slurm-9001", one_node)


@pytest.mark.slow
@pytest.mark.parametrize("dead", [1, 0])
def test_a_dead_node_ends_the_other_with_one_line(tmp_path, dead):
    """The worker of node `dead` is killed (-9) in its 2nd step; the other node's worker ends
    at its next collective with one line of its own and exit 1, within the timeout."""
    fault = [
        "+callbacks.fault._target_=faults.Fault",
        "+callbacks.fault.step=1",
        "+callbacks.fault.kind=sigkill",
        f"+callbacks.fault.rank={dead}",
        "trainer.limit_train_batches=6",
    ]
    procs = torchrun_nodes(tmp_path / "logs", free_port(), *fault)
    outputs = finish(procs, timeout=300)
    assert all(p.returncode != 0 for p in procs)
    survivor = outputs[1 - dead]
    errors = [line for line in survivor.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, survivor[-3000:]
    assert "another process of this job stopped or cannot be reached" in errors[0]
    worker = survivor.split("failed (exitcode")[0]  # before torchrun's own failure report
    assert "Traceback" not in worker, survivor[-3000:]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_join_without_peers_says_what_it_waits_for_then_stops_in_one_line(
    rank, monkeypatch, capfd
):
    """`init_process_group` as Lightning calls it (its 30-minute collective timeout) for a
    job of 2 whose other process never starts: a line that says what it waits for, then one
    JoinFailed line after ddp_join_timeout (not 30 minutes), and none of torch's C++ stack
    dumps on the console. Rank 0 hosts the rendezvous (it counts who joined), rank 1 finds
    nobody there."""
    import datetime
    import time

    import torch.distributed as dist

    from litlab.runs import ddp_join

    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    ddp_join.arm(1)
    ddp_join.install_bounded_join()
    start = time.monotonic()
    try:
        with pytest.raises(ddp_join.JoinFailed) as failed:
            dist.init_process_group(
                "gloo", rank=rank, world_size=2, timeout=datetime.timedelta(minutes=30)
            )
    finally:
        ddp_join.arm(None)
    assert time.monotonic() - start < 20
    message = str(failed.value)
    assert "\n" not in message and failed.value.every_rank  # its node's only line
    assert message.startswith(f"DDP rank {rank} of 2: ")
    assert f"127.0.0.1:{port} within ddp_join_timeout=1 s" in message
    assert ("only 1 of the job's 2 processes joined" in message) == (rank == 0)
    assert ("nothing answered" in message) == (rank == 1)
    err = capfd.readouterr().err
    assert err.strip() == (
        f"DDP rank {rank} of 2: waiting for the job's other processes (2 in all, over every "
        f"node) to join at 127.0.0.1:{port}; giving up after ddp_join_timeout=1 s"
    )
    assert not dist.is_initialized()


def test_a_master_port_in_use_is_one_line_at_once(monkeypatch, capfd):
    """Rank 0 cannot host the rendezvous (another program holds MASTER_PORT): one JoinFailed
    line that names the address and why, at once, not after the timeout."""
    import datetime

    import torch.distributed as dist

    from litlab.runs import ddp_join

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        ddp_join.arm(60)
        ddp_join.install_bounded_join()
        try:
            with pytest.raises(ddp_join.JoinFailed) as failed:
                dist.init_process_group(
                    "gloo", rank=0, world_size=2, timeout=datetime.timedelta(minutes=30)
                )
        finally:
            ddp_join.arm(None)
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(
        f"DDP rank 0 of 2: the processes of this job cannot meet at 127.0.0.1:{port} ("
    )
    assert "EADDRINUSE" in message and message.endswith("check MASTER_ADDR and MASTER_PORT")
    assert capfd.readouterr().err == ""  # no waiting line: it failed at once


def test_a_bounded_join_gives_the_group_its_collective_timeout_back(monkeypatch, capfd):
    """Once every rank has joined, the process group's store waits as long as Lightning
    asked (30 minutes), not ddp_join_timeout: a long test on rank 0 must not fail the
    others at a barrier. Nothing is printed on a prompt join."""
    import datetime

    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    from litlab.runs import ddp_join

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    # bounded, with a notice well past a prompt join's time on a loaded machine (at 2 s the
    # notice came at 1 s, and a clean-clone CI run beside apt once took longer than that)
    ddp_join.arm(60)
    ddp_join.install_bounded_join()
    try:
        dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(hours=1))
        assert distributed_c10d._get_default_store().timeout == datetime.timedelta(hours=1)
    finally:
        ddp_join.arm(None)
        if dist.is_initialized():
            dist.destroy_process_group()
    assert capfd.readouterr().err == ""


@pytest.mark.slow  # two train.py starts at once (150 s on the shared 2-core machine)
def test_a_node_whose_peer_never_starts_stops_in_one_line_and_leaves_no_run_dir(tmp_path):
    """`train.py trainer=ddp trainer.num_nodes=2` on node 0 only (MASTER_ADDR/MASTER_PORT/
    NODE_RANK, as Lightning's general cluster environment reads them), and a SLURM task of
    node 1 only: each prints what it waits for, then one error line after ddp_join_timeout,
    exit 2; node 0's fresh run dir is gone."""
    slurm = {"SLURM_JOB_ID": "9002", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1"}
    slurm |= {"SLURM_NNODES": "2", "SLURM_NODELIST": "127.0.0.1", "SLURM_JOB_NAME": "train"}
    slurm |= {"SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "1"}
    nodes = {
        "node0": {"MASTER_ADDR": "127.0.0.1", "NODE_RANK": "0"},
        "node1": slurm,
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, *train_cmd(tmp_path / name, "ddp_join_timeout=3")],
            cwd=ROOT,
            env=env(OMP_NUM_THREADS="1", MASTER_PORT=str(free_port()), **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, extra in nodes.items()
    }
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        lines = [line for line in err.splitlines() if line.strip()]
        assert proc.returncode == 2, err[-3000:]
        assert len(lines) == 2, err[-3000:]
        assert lines[0].startswith(f"DDP rank {name[-1]} of 2: waiting for the job's other")
        assert lines[1].startswith(f"error: DDP rank {name[-1]} of 2: ")
        assert "within ddp_join_timeout=3 s" in lines[1]
    assert run_dirs(tmp_path / "node0") == []  # nothing half-written
    # node 1's log file stays in the job's shared run dir: rank 0 owns that dir
    assert [p.name for p in (tmp_path / "node1" / "train" / "runs" / "slurm-9002").iterdir()] == [
        "train.log"
    ]
