"""Every resume a stopped run prints works as printed (issue 46): train.py, compress.py and
federate.py on each domain kind. Each run is stopped after its first saved epoch (round), the
command it printed is split as a shell would and run, and it must finish the run in the same
dir. In process (`litlab.api.run`: the CLI's run dir, failure record and one-line errors):
train and compress print `resume: <command>` from the record their stop leaves
(`failed.json`, asserted equal), federate prints its SIGTERM line (the in-process engine
calls the same `stopped`). The table kind runs in `make test` (a second or two per run); the
others are `slow`."""

import json
import shlex
import shutil
from pathlib import Path

import pytest
from helpers.federated_engine import Stopped, engine
from helpers.masks import mask_folder
from helpers.runs import require_shared

import litlab.federated  # noqa: F401  (Flower's telemetry off before flwr is imported)
from litlab.api import run

QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null"]
# 3 epochs of at most 2 batches; the fault (tests/faults.py, from $FAULT, so the printed
# command, which repeats it, runs without it) strikes at the start of the third epoch
BUDGET = [
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.num_sanity_val_steps=0",
    "+callbacks.fault._target_=faults.EnvFault",
]
SMALL_UNET = ["model.net.channels=[8,16]", "model.net.strides=[2]"]
# kind -> (its overrides for train.py and federate.py, training batches per epoch)
KINDS = {
    "table regression (diabetes)": (["experiment=diabetes"], 2),
    "image classification (digits)": ([], 2),
    "volume segmentation (phantoms)": (
        [
            "model=unet3d",
            "data.num_volumes=12",
            "data.size=24",
            "data.size_jitter=3",
            "data.patch_size=[16,16,16]",
            "data.samples_per_volume=4",
            "data.batch_size=4",
            *SMALL_UNET,
        ],
        2,
    ),
    "2D segmentation (masks)": (
        ["data=masks", "model=unet2d", "data.image_size=32", "data.num_classes=3"]
        + ["data.batch_size=4", *SMALL_UNET],
        2,
    ),
    "node classification (SBM graph)": (["model=gnn"], 1),
    "graph classification (MUTAG)": (["experiment=gin_mutag"], 2),
}
CHEAP = ("table regression (diabetes)",)


def _recipe(entry: str):
    if entry == "train":
        from litlab.recipes import train_and_test

        return train_and_test
    from litlab.compression.recipe import compress

    return compress


def _stop(entry: str, overrides: list[str], step: int, monkeypatch):
    """Run until the fault at `step`; the run dir it leaves, and the command it printed."""
    logs = Path(next(o for o in overrides if o.startswith("paths.log_dir=")).split("=", 1)[1])
    before = set(logs.rglob("failed.json"))
    monkeypatch.setenv("FAULT", f"raise@train:{step}")
    with pytest.raises(RuntimeError, match="tests/faults.py"):
        run(entry, overrides, _recipe(entry))
    monkeypatch.delenv("FAULT")
    [failed] = set(logs.rglob("failed.json")) - before
    command = json.loads(failed.read_text())["resume"]
    args = shlex.split(command)
    assert args[:2] == ["python", f"src/{entry}.py"], command
    return failed.parent, args[2:]


def _resumed(entry: str, run_dir, printed: list[str], steps: int):
    """The printed command finishes the run in its own dir, every step trained once."""
    import torch

    result = run(entry, printed, _recipe(entry))
    assert not (run_dir / "failed.json").exists()
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == steps, (entry, last["global_step"])
    return result


def _federate(kind_args: list[str], logs):
    """Stopped in round 2 of 3 (SIGTERM's line printed), then resumed as printed."""
    from litlab.federated.federation import federate

    given = [f"paths.log_dir={logs}", "extras.print_config=false"]
    given += ["federate.num_clients=2", "federate.rounds=3", "trainer.limit_train_batches=2"]
    printed = []
    with pytest.raises(Stopped):
        run("federate", [*given, *kind_args], lambda c: federate(c, engine(2, printed)))
    line = printed[0]
    assert "rounds up to 1 of 3 are saved" in line and "; resume with: " in line
    command = line.split("; resume with: ", 1)[1]
    run_dir = next((logs / "federate" / "runs").iterdir())
    assert json.loads((run_dir / "failed.json").read_text())["resume"] == command
    args = shlex.split(command)
    assert args[:2] == ["python", "src/federate.py"], command
    metrics = run("federate", args[2:], lambda c: federate(c, engine()))
    rounds = (run_dir / "history.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] for r in rounds] == ["0", "1", "2", "3"]
    assert not (run_dir / "failed.json").exists() and metrics


@pytest.mark.parametrize(
    "kind",
    [k if k in CHEAP else pytest.param(k, marks=pytest.mark.slow) for k in KINDS],
)
def test_each_entry_point_resumes_as_printed(kind, tmp_path, monkeypatch):
    """train.py stopped in epoch 3 of 3, resumed as printed; compress.py (prune) on its
    checkpoint, stopped and resumed alike; federate.py stopped in round 2 of 3, resumed as
    its SIGTERM line says. Issue 46: federate.py experiment=diabetes printed a command that
    was refused ("callbacks.early_stopping.patience is 20 in the run to resume, absent")."""
    args, batches = KINDS[kind]
    args = list(args)
    if "masks" in kind:
        args.append(f"data.root={mask_folder(tmp_path / 'masks')}")
    if "MUTAG" in kind:
        data = tmp_path / "data"
        shutil.copytree(require_shared("TUDataset/MUTAG"), data / "TUDataset" / "MUTAG")
        args.append(f"paths.data_dir={data}")
    logs = tmp_path / "logs"
    fault_step, steps = 2 * batches, 3 * batches

    train_and_test = [f"paths.log_dir={logs}", *QUIET, *BUDGET, *args]
    run_dir, printed = _stop("train", train_and_test, fault_step, monkeypatch)
    trained = _resumed("train", run_dir, printed, steps)
    assert trained.run_dir == run_dir and trained.metrics

    compress = [f"paths.log_dir={logs}", *QUIET, *BUDGET, f"ckpt_path={trained.best_checkpoint}"]
    compress += ["compress=prune", "compress.prune.ratio=0.5", "report.onnx=false"]
    compress += ["report.batch_sizes=[1]", "report.budget_s=0.1"]
    run_dir, printed = _stop("compress", compress, fault_step, monkeypatch)
    reports = _resumed("compress", run_dir, printed, steps)
    assert (run_dir / "compress_report.json").is_file() and reports

    _federate(args, tmp_path / "federated")


def test_a_printed_resume_names_relative_paths_from_where_the_run_started(tmp_path, monkeypatch):
    """Printed as `python src/train.py ...` (run from the project folder), a resume of a run
    started elsewhere with relative paths would name other files: they are made absolute."""
    from litlab.runs.run_end import resume_command

    monkeypatch.chdir(tmp_path)
    given = ["experiment=diabetes", "data.path=mydata/t.csv", "paths.log_dir=logs2"]
    given += ["data.batch_size=8", "data.path=a b.csv", "ckpt_path=last"]
    args = shlex.split(resume_command("train", given, "logs2/diabetes/runs/x"))
    assert args == [
        "python",
        "src/train.py",
        "experiment=diabetes",
        f"data.path={tmp_path}/mydata/t.csv",
        f"paths.log_dir={tmp_path}/logs2",
        "data.batch_size=8",
        "data.path=a b.csv",  # not a plain path to Hydra: left as typed
        f"ckpt_path={tmp_path}/logs2/diabetes/runs/x",
    ]
