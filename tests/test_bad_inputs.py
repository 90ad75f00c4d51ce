"""A table of bad commands: each fails with exit code 2, one line that names the key, the bad
value and what is valid, and leaves no run dir behind. Run in-process (the entry points'
real `cli.run_main(main)`, argv and all) so the table costs seconds; a few run as subprocesses."""

import subprocess
import sys
import time

import pytest
from helpers.runs import QUIET, ROOT, run_dirs, run_in_process

FAKE_CKPT = "@fake"  # replaced by a file made by the `files` fixture


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


TRAIN = [  # (overrides, words the error line must contain)
    (["model=nope"], ["model=nope", "cnn", "resnet18"]),
    (["data=nope"], ["data=nope", "cifar10", "digits"]),
    (["trainer=nope"], ["trainer=nope", "cpu", "gpu"]),
    (["trainer.max_epoch=3"], ["trainer.max_epoch", "did you mean trainer.max_epochs"]),
    (["modle=cnn"], ["modle", "did you mean model"]),
    (["+trainer.max_epoch=3"], ["trainer.max_epoch", "did you mean max_epochs"]),
    (["+model.net.chanels=[8,16]"], ["model.net.chanels", "did you mean channels"]),
    (["trainer.max_epochs=abc"], ["trainer.max_epochs=abc", "int"]),
    (["data.batch_size=lots"], ["data.batch_size=lots", "integer"]),
    (["seed=abc"], ["seed=abc", "int"]),
    # found by Lightning when it meets the data (0.01 of 21 batches): one line, nothing kept
    (["trainer.limit_train_batches=0.01"], ["Lightning refused a setting", "0.01 * 21 < 1"]),
    (["model.optimizer.lr=-0.1"], ["model.optimizer.lr=-0.1", "> 0"]),
    (["model.optimizer.weight_decay=-1"], ["model.optimizer", "weight_decay"]),
    (["trainer.max_epochs=0"], ["trainer.max_epochs=0", ">= 1"]),
    (["trainer.limit_train_batches=1.5"], ["trainer.limit_train_batches=1.5", "fraction"]),
    (["trainer.precision=17"], ["trainer.precision=17", "bf16-mixed", "32-true"]),
    (
        ["trainer.precision=16-mixed", "trainer.accelerator=cpu"],
        ["trainer.precision=16-mixed", "not supported on CPU", "bf16-mixed"],
    ),
    (
        ["trainer.devices=999", "trainer.accelerator=cpu"],
        ["trainer.devices=999", "this machine has"],
    ),
    (["trainer.accelerator=tpux"], ["trainer.accelerator=tpux", "cpu", "did you mean tpu"]),
    (["++trainer.strategy=dpp"], ["trainer.strategy=dpp", "did you mean ddp"]),
    pytest.param(
        ["trainer.accelerator=gpu"],
        ["trainer.accelerator=gpu", "trainer.accelerator=cpu"],
        marks=pytest.mark.skipif("_cuda()", reason="a GPU is present"),
    ),
    (
        ["model=regressor", "data=table", "data.id_column=pid"],
        ["data.id_column=pid needs a table (data.path=your.csv)"],
    ),
    (["data=imagefolder"], ["data.root is required", "data.root="]),
    (
        ["data=imagefolder", "data.root=/nonexistent/images"],
        ["data.root=/nonexistent/images", "folder"],
    ),
    (
        ["data=mnist", "data.download=false", "data.data_dir=/nonexistent/mnist"],
        ["data.data_dir=/nonexistent/mnist", "download"],
    ),
    (["data.val_fraction=1.5"], ["data.val_fraction=1.5", "between 0 and 1"]),
    # a valid fraction whose split leaves no sample: found while the data is set up (in fit)
    (["data.test_fraction=0.999"], ["data.val_fraction=0.1 splits 1 samples", "at least one"]),
    (["model.monitor_mode=maximum"], ["model.monitor_mode=maximum", "min or max"]),
    (["data._target_=faults.OtherTaskData"], ["cannot train on", "other_task"]),
    (
        ["model._target_=litlab.models.nope.Net"],
        ["model._target_=litlab.models.nope.Net", "cannot be imported"],
    ),
    (["train=false", "test=false"], ["nothing to do"]),
    (
        ["ckpt_path=/nonexistent/last.ckpt"],
        ["ckpt_path=/nonexistent/last.ckpt", "no such checkpoint"],
    ),
    (["ckpt_path=last"], ["ckpt_path=last", "no run of task 'train'"]),
    (["ckpt_path=/dev/null"], ["ckpt_path=/dev/null is not a regular file", "a .ckpt file"]),
    # an empty value is not the working directory (which may even be a run dir)
    (["ckpt_path="], ["ckpt_path= is empty", "a .ckpt file, a run dir of train.py or last"]),
    (["ckpt_path=@fake/truncated.ckpt"], ["truncated.ckpt", "truncated or corrupt"]),
    (["ckpt_path=@fake/other_model.ckpt"], ["other_model.ckpt", "holds a x.OtherModel model"]),
    (["trainer.max_epochs=[1,"], ["trainer.max_epochs=[1,"]),
    # issue 18, one per mechanism (the full set, in process: test_reliability_inputs.py)
    (["seed=-5"], ["seed=-5", "4294967295"]),
    (["model=gnn", "model.net.conv=foo"], ["model.net.conv=foo", "gcn | gat | sage"]),
    (["trainer.max_epochs=-1"], ["trainer.max_epochs=-1", "used as model.scheduler.T_max"]),
    (["model.optimizer.lr=fast"], ["model.optimizer.lr=fast", "learning rate > 0"]),
    (["model=gnn", "data=mutag", "data.fold=10"], ["data.fold=10", "choose 0 to 9"]),
    (
        ["data=imagefolder", "data.root=@fake/oneclass"],
        ["oneclass", "at least 2 class sub-folders"],
    ),
    (["model.monitor=val/nope"], ["model.monitor=val/nope", "val/acc"]),
    (["train=false"], ["train=false", "ckpt_path="]),
    (["paths.log_dir=/proc/nope"], ["cannot create the run dir", "/proc/nope"]),
    (["tags=[mön tag]"], ["cannot parse override 'tags=[mön tag]'", "quote"]),
    # issue 34, one per mechanism (the full set, in process: test_reliability_inputs.py)
    (["~data"], ["data is required by src/train.py", "data=digits"]),
    (["~trainer"], ["trainer is required by src/train.py", "trainer=default"]),
    (["model.optimizer.lr=inf"], ["model.optimizer.lr=inf", "<= 10"]),
    (
        ["trainer.accelerator=cpu", "trainer.precision=bf16-true"],
        ["trainer.precision=bf16-true is not supported on CPU", "bf16-mixed"],
    ),
    (["threads=100000"], ["threads=100000 is not valid", "an integer from 1 to"]),
    (["ddp_join_timeout=0"], ["ddp_join_timeout=0", "seconds in (0, 86400]"]),
    (["ddp_join_timeout=.inf"], ["ddp_join_timeout=.inf", "seconds in (0, 86400]"]),
    # issue 36: k-fold on every domain, refused before any data is read
    (["data.num_folds=5", "data.fold=5"], ["data.fold=5 is not valid", "choose 0 to 4"]),
    (["data.num_folds=1"], ["data.num_folds=1", "null (the usual split) or an integer >= 2"]),
    (
        ["data.num_folds=175"],
        ["data.num_folds=175 is too many for digits", "smallest class 174", "use 2 to 174"],
    ),
    (["data.fold=3"], ["data.fold=3 needs k-fold", "data.num_folds"]),
    (
        ["model=gnn", "data=cora", "data.num_folds=5"],
        ["data.num_folds=5", "fixed node split", "k-fold is not available"],
    ),
    pytest.param(
        ["model=resnet3d", "data.num_folds=300", "data.fold=1"],
        ["data.num_folds=300 is too many for the phantoms (400 volumes", "use 2 to"],
        marks=pytest.mark.slow,
    ),
    pytest.param(
        ["model=unet3d", "data.num_folds=49"],
        ["data.num_folds=49 is too many for the phantoms (48 volumes)", "use 2 to 48"],
        marks=pytest.mark.slow,
    ),
    pytest.param(
        ["model=gnn", "data=sbm", "data.fold=2"],
        ["data.fold=2: SBMDataModule keeps the benchmark's fixed node split"],
        marks=pytest.mark.slow,
    ),
]
EVAL = [
    ([], ["ckpt_path is required"]),
    (["ckpt_path=/nonexistent.ckpt"], ["ckpt_path=/nonexistent.ckpt", "no such checkpoint"]),
    (["ckpt_path=@fake"], ["is a folder", "pass a .ckpt file"]),
    (["ckpt_path=' '"], ["ckpt_path= is empty", "a .ckpt file"]),
    # exists but is no file: a device (a pipe alike) is never opened
    (["ckpt_path=/dev/null"], ["ckpt_path=/dev/null is not a regular file", "a .ckpt file"]),
    (
        ["ckpt_path=@fake/not_litlab.ckpt"],
        ["not_litlab.ckpt", "not a checkpoint written by litlab"],
    ),
    (["ckpt_path=@fake/truncated.ckpt"], ["truncated.ckpt", "truncated or corrupt"]),
    (["ckpt_path=@fake/other_model.ckpt", "split=train"], ["split=train", "test | val"]),
    (["ckpt_path=@fake/crafted.ckpt"], ["data._target_=shutil.copy", "trust_checkpoint=true"]),
]


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """A folder of broken checkpoint files (truncated, not litlab's, another model's, one whose
    config would call shutil.copy) and an image folder with one class. Made once for the
    module: every check only reads it (each is refused before anything is written)."""
    import torch

    folder = tmp_path_factory.mktemp("fake")
    torch.save({"a": torch.zeros(1000)}, folder / "not_litlab.ckpt")
    torch.save(
        {"state_dict": {}, "litlab_config": {"model": {"_target_": "x.OtherModel"}}},
        folder / "other_model.ckpt",
    )
    torch.save(
        {
            "state_dict": {},
            "litlab_config": {
                "data": {"_target_": "shutil.copy", "src": "x", "dst": "y"},
                "model": {"_target_": "litlab.domains.vision.module.ImageClassifier"},
            },
        },
        folder / "crafted.ckpt",
    )
    (folder / "oneclass" / "cat").mkdir(parents=True)
    data = (folder / "not_litlab.ckpt").read_bytes()
    (folder / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    return folder


def _check(code, err, words, log_dir, task):
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2, f"exit {code}, stderr:\n{err[-3000:]}"
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    for word in words:
        assert word in lines[0], f"{word!r} not in: {lines[0]}"
    assert run_dirs(log_dir, task) == [], "a run dir was left behind"
    # every case starts from an empty log dir: not even Hydra's <task>/runs/ folder is left
    assert not (log_dir / task).exists(), sorted(str(p) for p in log_dir.rglob("*"))


@pytest.mark.parametrize("overrides,words", TRAIN)
def test_bad_train_command(overrides, words, fake, tmp_path, capfd):
    overrides = [o.replace(FAKE_CKPT, str(fake)) for o in overrides]
    code, err = run_in_process("train.py", overrides, tmp_path / "logs", capfd)
    _check(code, err, words, tmp_path / "logs", "train")


@pytest.mark.parametrize("overrides,words", EVAL)
def test_bad_eval_command(overrides, words, fake, tmp_path, capfd):
    overrides = [o.replace(FAKE_CKPT, str(fake)) for o in overrides]
    words = [w.replace(FAKE_CKPT, str(fake)) for w in words]
    code, err = run_in_process("eval.py", overrides, tmp_path / "logs", capfd)
    _check(code, err, words, tmp_path / "logs", "eval")


# issue 34: every job of a sweep is checked before the first starts (runs/sweep_dir):
# (the sweep's overrides, words of the one line); nothing trained, no sweep dir
SLOW = pytest.mark.slow  # more of the same mechanism: .ci/run's second stage
SWEEPS = [
    (["seed=1,2,-5"], ["job 2 of the sweep (seed=-5): seed=-5", "4294967295"]),
    pytest.param(  # issue 36: a fold past the last, in a k-fold sweep
        ["data.num_folds=3", "data.fold=0,1,2,3"],
        ["job 3 of the sweep (data.fold=3): data.fold=3 is not valid; choose 0 to 2"],
        marks=SLOW,
    ),
    pytest.param(
        ["model.optimizer.lr=0.01,inf"],
        ["job 1 of the sweep (model.optimizer.lr=inf)", "<= 10"],
        marks=SLOW,
    ),
    pytest.param(
        ["trainer.max_epochs=1,0", "seed=1,2"],
        ["job 2 of the sweep (trainer.max_epochs=0 seed=1): trainer.max_epochs=0"],
        marks=SLOW,
    ),
    pytest.param(
        ["data.batch_size=32,0"],
        ["job 1 of the sweep (data.batch_size=0)", "integer >= 1"],
        marks=SLOW,
    ),
    pytest.param(
        ["model=cnn,nope"],
        ["job 1 of the sweep (model=nope): unknown option model=nope"],
        marks=SLOW,
    ),
    pytest.param(
        ["threads=1,100000"], ["job 1 of the sweep (threads=100000)", "from 1 to"], marks=SLOW
    ),
    pytest.param(
        ["seed=1,2", "~data"], ["job 0 of the sweep (seed=1): data is required"], marks=SLOW
    ),
    pytest.param(
        ["model=resnet18", "model.optimizer.momentum=0.9,2"],
        ["job 1 of the sweep (model.optimizer.momentum=2)"],
        marks=SLOW,
    ),
    pytest.param(
        ["trainer.accelerator=cpu", "trainer.precision=32-true,bf16-true"],
        ["job 1 of the sweep (trainer.precision=bf16-true)", "not supported on CPU"],
        marks=SLOW,
    ),
    pytest.param(  # an Optuna search: the trials queued up front
        [
            "hparams_search=digits_cnn",
            "hydra.sweeper.enqueue_trials=[{model.net.dropout:0.1},{model.net.dropout:1.5}]",
        ],
        ["queued trial 1 of the search (model.net.dropout=1.5)", "a probability in [0, 1)"],
        marks=SLOW,
    ),
    (  # the summary callback's own settings (Hydra builds it from whatever is given)
        ["seed=1,2", "hydra.callbacks.sweep_summary.fail_fast=maybe"],
        ["hydra.callbacks.sweep_summary.fail_fast=maybe", "true or false"],
    ),
    pytest.param(
        ["seed=1,2", "+hydra.callbacks.sweep_summary.fail_fst=true"],
        ["unknown key hydra.callbacks.sweep_summary.fail_fst; did you mean fail_fast?"],
        marks=SLOW,
    ),
    pytest.param(
        ["seed=1,2", "hydra.callbacks.sweep_summary.replica_keys=5"],
        ["hydra.callbacks.sweep_summary.replica_keys=5", "a list of str"],
        marks=SLOW,
    ),
    (  # a search space that reaches past a bound: refused at its edge, before any trial
        ["hparams_search=digits_cnn", "model.optimizer.lr=tag(log,interval(0.001,100))"],
        ["the search space's edge", "model.optimizer.lr=100.0", "<= 10"],
    ),
]


@pytest.mark.parametrize("overrides,words", SWEEPS)
def test_bad_sweep_job_is_refused_before_the_first_job(overrides, words, tmp_path, capfd):
    log_dir = tmp_path / "logs"
    code, err = run_in_process("train.py", ["hydra.mode=MULTIRUN", *overrides], log_dir, capfd)
    _check(code, err, words, log_dir, "train")
    assert not (log_dir / "train").exists(), "a sweep dir was made"
    assert not list(tmp_path.rglob("*.ckpt")), "a job trained"


def test_a_sweep_too_long_to_keep_its_jobs_composes_them_again(tmp_path, capfd, monkeypatch):
    """The first pass (what needs no import, every job) keeps at most KEPT_JOBS composed jobs for
    the second; the others are composed again and judged alike: job 1's dropout, which only
    its net's signature refuses (the second pass imports it), is named as it is when kept."""
    from litlab.runs import sweep_dir

    monkeypatch.setattr(sweep_dir, "KEPT_JOBS", 1)
    overrides = ["model.net.dropout=0.1,1.5"]
    code, err = run_in_process("train.py", ["hydra.mode=MULTIRUN", *overrides], tmp_path, capfd)
    _check(code, err, ["job 1 of the sweep (model.net.dropout=1.5)", "[0, 1)"], tmp_path, "train")
    assert not (tmp_path / "train").exists(), "a sweep dir was made"


@pytest.mark.parametrize(
    "script,overrides",
    [
        ("train.py", ["trainer.max_epochs=0"]),
        ("eval.py", []),
        ("train.py", ["-m", "seed=1,2,-5"]),  # issue 34: the third job's seed, before the first
    ],
)
def test_bad_command_subprocess_fails_fast(script, overrides, tmp_path):
    """End to end, as a user types it: exit 2, one line, no traceback, in seconds."""
    quiet = QUIET if script == "train.py" else []
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "src" / script),
            f"paths.log_dir={tmp_path}",
            *quiet,
            *overrides,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert elapsed < 60, f"{elapsed:.1f} s to reject a bad command"
    assert run_dirs(tmp_path, script[:-3]) == []
    assert not (tmp_path / script[:-3] / "multiruns").exists()


#: packages that take seconds to import: none before a refusal of what the command line says
HEAVY = (
    "torch", "lightning", "pytorch_lightning", "torchvision", "torchmetrics", "torch_geometric",
    "monai", "scipy", "sklearn", "pandas", "matplotlib", "onnx", "onnxruntime",
)  # fmt: skip


def _no_gpu() -> bool:
    from litlab.config.resolvers import certainly_no_gpu

    return certainly_no_gpu()


def _heavy_imports(importtime: list[str]) -> list[str]:
    """`-X importtime` lines (an importer after what it imports, two spaces a level) -> each
    heavy package that came in, with its importer where importtime names one ('torch <-
    litlab.x'; none for what a function or `importlib.import_module` imported as it ran)."""
    rows = []
    for line in importtime:
        name = line.rsplit("|", 1)[1]
        rows.append((len(name) - len(name.lstrip()), name.strip()))
    parent, later = [None] * len(rows), []  # the next row of a lower level is the importer
    for i in range(len(rows) - 1, -1, -1):
        while later and rows[later[-1]][0] >= rows[i][0]:
            later.pop()
        parent[i] = later[-1] if later else None
        later.append(i)
    found = []
    for i, (_, name) in enumerate(rows):
        if name.split(".")[0] not in HEAVY:
            continue
        while parent[i] is not None and rows[parent[i]][1].split(".")[0] in HEAVY:
            i = parent[i]
        entry = rows[i][1] + (f" <- {rows[parent[i]][1]}" if parent[i] is not None else "")
        if entry not in found:
            found.append(entry)
    return found


NO_GPU = pytest.mark.skipif(not _no_gpu(), reason="a GPU may be here: the command would train")
GNN_ON_DIGITS = (
    "error: model=gnn (node_classification, graph_classification) cannot train on data=digits "
    "(image_classification); data that fit this model: citeseer, cora, enzymes, karate, mutag, "
    "proteins, pubmed, sbm"
)
CNN_ON_CORA = (
    "error: model=cnn (image_classification) cannot train on data=cora (node_classification); "
    "data that fit this model: cifar10, digits, fashion_mnist, imagefolder, mnist"
)
LR_WORD = (
    "error: model.optimizer.lr=fast has the wrong type or value; valid: a learning rate > 0 "
    "and <= 10 (e.g. 1e-3)"
)
NO_GPU_HERE = (
    "error: trainer.accelerator=gpu but no GPU device is visible; use trainer.accelerator=cpu "
    "(or trainer=cpu)"
)
FP16_ON_CPU = (
    "error: trainer.precision=16-mixed is not supported on CPU; use trainer.precision=bf16-mixed "
    "or 32-true on CPU (16-mixed, 16-true, bf16-true and transformer-engine need a GPU)"
)
NO_CKPT = "error: ckpt_path=/nonexistent/x.ckpt: no such checkpoint file"
BAD_SECOND_JOB = (
    "error: job 1 of the sweep (seed=-5): seed=-5 has the wrong type or value; valid: an "
    "integer in [0, 4294967295]"
)
FAIL_CLIENTS = "error: federate.fail_clients=[10] names client 10; clients are 0 to 9"


@pytest.mark.parametrize(
    "script,overrides,line",
    [
        pytest.param("train.py", ["model=gnn", "data=digits"], GNN_ON_DIGITS, id="gnn-digits"),
        pytest.param(
            "train.py", ["data=cora", "data.data_dir=/nonexistent"], CNN_ON_CORA, id="cnn-cora"
        ),
        pytest.param("train.py", ["model.optimizer.lr=fast"], LR_WORD, id="lr-word"),
        pytest.param("train.py", ["trainer=gpu"], NO_GPU_HERE, marks=NO_GPU, id="gpu"),
        pytest.param(
            "train.py", ["trainer.precision=16-mixed"], FP16_ON_CPU, marks=NO_GPU, id="fp16-cpu"
        ),
        pytest.param("eval.py", ["ckpt_path=/nonexistent/x.ckpt"], NO_CKPT, id="eval-no-ckpt"),
        # a sweep judges what needs no import for every job before any job's imports
        pytest.param("train.py", ["-m", "seed=1,-5"], BAD_SECOND_JOB, id="sweep-job-1"),
        pytest.param("federate.py", ["federate.fail_clients=[10]"], FAIL_CLIENTS, id="federate"),
    ],
)
def test_common_mistakes_are_refused_before_torch_is_imported(script, overrides, line, tmp_path):
    """Issue 50: a refusal of what the command line says costs about a second, not the seconds
    of torch and Lightning: the process (`-X importtime`) imports none of `HEAVY` before it
    says it, in one line."""
    proc = subprocess.run(
        [
            sys.executable, "-X", "importtime", str(ROOT / "src" / script), *overrides,
            f"paths.log_dir={tmp_path}",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = proc.stderr.splitlines()
    told = [i for i, ln in enumerate(lines) if not ln.startswith("import time:")]
    assert (proc.returncode, [lines[i] for i in told], proc.stdout) == (2, [line], "")
    heavy = _heavy_imports(lines[1 : told[0]])  # [0]: importtime's header
    assert not heavy, f"imported before the refusal: {heavy}"


@pytest.mark.parametrize(
    "overrides,words",
    [  # job 0 is federate.py's default (its client epochs `auto`, resolved as the job resolves it)
        (["federate.rounds=1,0"], ["job 1 of the sweep (federate.rounds=0)", "federate.rounds"]),
        (
            ["federate.alpha=0.5,-1", "federate/strategy=fedprox"],
            ["job 1 of the sweep (federate.alpha=-1)", "federate.alpha"],
        ),
    ],
)
def test_bad_federate_sweep_job_is_refused_and_the_default_job_is_not(
    overrides, words, tmp_path, capfd
):
    log_dir = tmp_path / "logs"
    code, err = run_in_process("federate.py", ["hydra.mode=MULTIRUN", *overrides], log_dir, capfd)
    _check(code, err, words, log_dir, "federate")
    assert not (log_dir / "federate").exists(), "a sweep dir was made"
