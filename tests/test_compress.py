"""compress.py: structured pruning really removes parameters, the distillation loss is the
textbook one, students and pruned nets evaluate like any run, int8 stays close, and bad input
costs one line. The end-to-end runs on digits are `slow`."""

import json
import math

import pytest
import torch
from helpers.nets import TinyResNet
from helpers.runs import ROOT, run_in_process

from litlab.compression import distill, prune
from litlab.compression import prune as resize
from litlab.config.compose import compose
from litlab.domains.vision.nets import SmallCNN
from litlab.errors import UserError

FAST = ["extras.print_config=false", "callbacks.rich_progress_bar=null", "report.budget_s=0.2"]


def test_a_student_just_over_the_bound_is_narrowed_just_under_it():
    """Given channels [16, 32] at 28% of the teacher's parameters (bound 25%), the student is
    the largest narrowing that fits ([8, 16] once, 11%: on digits a student of 7% reached 0.78
    accuracy where 0.91 was due)."""
    from litlab.compression.distill import fitting_student

    def count(model: dict) -> int:  # the second conv dominates, and a fixed part
        a, b = model["net"]["channels"]
        return a * b + 100

    net = {"_target_": "litlab.domains.vision.nets.SmallCNN"}
    teacher = {"net": {**net, "channels": [32, 64]}}
    given = {"net": {**net, "channels": [16, 32]}}
    assert 0.25 < count(given) / count(teacher) < 0.3
    student = fitting_student(teacher, given, count, 0.25)
    assert 0.2 < count(student) / count(teacher) <= 0.25, student
    assert student["net"]["channels"] == [14, 29]  # scale 0.9


def test_kd_loss_matches_a_hand_computation():
    s, t, y = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([[1.0, 3.0, 0.0]]), torch.tensor([1])
    alpha, temp = 0.3, 2.0
    p_t = [math.exp(v / temp) for v in (1.0, 3.0, 0.0)]
    p_s = [math.exp(v / temp) for v in (2.0, 0.0, -1.0)]
    p_t, p_s = [v / sum(p_t) for v in p_t], [v / sum(p_s) for v in p_s]
    kl = sum(a * math.log(a / b) for a, b in zip(p_t, p_s))  # KL(teacher || student)
    ce = -math.log(math.exp(0.0) / sum(math.exp(v) for v in (2.0, 0.0, -1.0)))
    want = alpha * temp**2 * kl + (1 - alpha) * ce
    assert distill.kd_loss(s, t, y, alpha, temp).item() == pytest.approx(want, rel=1e-6)


def test_structured_pruning_removes_channels_and_rebuilds_from_config():
    torch.manual_seed(0)
    net = TinyResNet(1, 10)
    before = prune.count_parameters(net)[0]
    shapes = prune.structured(net, (torch.randn(2, 1, 8, 8),), 0.2, steps=2, num_classes=10)
    params = prune.count_parameters(net)[0]
    assert params <= 0.2 * before  # smaller tensors, not masks (nonzero: BN biases start at 0)
    assert not any("mask" in k for k in net.state_dict()) and net.fc.out_features == 10
    cfg = prune.pruned_net_config({"_target_": "helpers.nets.TinyResNet"}, shapes)
    assert json.loads(json.dumps(cfg)) == cfg  # plain values: weights_only checkpoints
    rebuilt = resize.resized_net(
        cfg["base_target"],
        cfg["base_kwargs"],
        cfg["shapes"],
        in_channels=1,
        num_classes=10,
        image_size=8,
    )
    prune.check_rebuilds(net, rebuilt)
    rebuilt.load_state_dict(net.state_dict())
    x = torch.randn(4, 1, 8, 8)
    net.eval(), rebuilt.eval()
    assert torch.equal(net(x), rebuilt(x))
    loss = torch.nn.functional.cross_entropy(rebuilt.train()(x), torch.tensor([0, 1, 2, 3]))
    loss.backward()  # the smaller net still trains
    assert all(p.grad is not None for p in rebuilt.parameters())


def test_unstructured_pruning_zeroes_weights_but_keeps_shapes():
    cb = prune.unstructured_callback(0.25, epochs=3)
    net = SmallCNN(1, 10, 8, channels=(8, 16))
    total = prune.count_parameters(net)[0]
    cb._parameters_to_prune = [
        (m, "weight") for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))
    ]
    for epoch in range(3):  # what ModelPruning does at the end of each epoch
        if cb._apply_pruning(epoch):  # not after the last: it fine-tunes the final sparsity
            cb.apply_pruning(cb.amount)
    cb.make_pruning_permanent(net)
    weights = [m.weight for m, _ in cb._parameters_to_prune]
    kept = sum(int(w.count_nonzero()) for w in weights)
    assert prune.count_parameters(net)[0] == total and not any(
        "mask" in k for k in net.state_dict()
    )
    assert kept == pytest.approx(0.25 * sum(w.numel() for w in weights), abs=2)


@pytest.mark.parametrize("ratio", [0, 1, 1.5, -0.2])
def test_pruning_ratio_outside_0_1_is_one_line(ratio):
    from litlab.config.after_training import Steps
    from litlab.config.messages import check_model

    with pytest.raises(UserError, match=r"compress.prune.ratio=.*keep in \(0, 1\)"):
        check_model(Steps, {"prune": {"ratio": ratio}}, "compress")


@pytest.mark.parametrize(
    "option,steps",
    [
        ("prune", ["prune"]),
        ("distill", ["distill"]),
        ("distill_graph", ["distill"]),
        ("quantize", ["quantize"]),
        ("[distill,quantize]", ["distill", "quantize"]),
        ("[prune,quantize]", ["prune", "quantize"]),
    ],
)
def test_every_compress_option_composes_and_chains_in_order(option, steps, tmp_path):
    from omegaconf import OmegaConf

    from litlab.compression.steps import training_config
    from litlab.config.after_training import Steps
    from litlab.config.messages import check_model

    cfg = compose(
        "compress",
        ["ckpt_path=x", f"compress={option}", "trainer.max_epochs=3"],
        output_dir=tmp_path,
    )
    assert list(cfg.compress) == steps
    assert check_model(Steps, OmegaConf.to_container(cfg.compress), "compress").order == steps
    model = {"monitor": "val/acc", "monitor_mode": "max"}
    train = training_config(cfg, {"model": model, "data": {}}, 1)  # every interpolation resolves
    assert train.callbacks.model_checkpoint.dirpath == f"{tmp_path}/checkpoints"
    assert train.trainer.max_epochs == 3  # compress.yaml's own settings win over trainer/
    if "distill" in steps and option != "distill_graph":
        assert train.compress.distill.get("student") is None  # chosen from the teacher


def test_teacher_of_another_task_or_class_count_is_one_line():
    with pytest.raises(UserError, match="teacher predicts 10 classes, the student's data has 7"):
        distill.check_teacher_fits("image_classification", 10, "image_classification", 7)
    with pytest.raises(UserError, match="teacher was trained for node_classification"):
        distill.check_teacher_fits("node_classification", 7, "image_classification", 7)
    from types import SimpleNamespace

    from litlab.compression.steps import Stage, check_teacher

    cora = {"data": {"_target_": "litlab.domains.graph.data.PlanetoidDataModule"}}
    digits = {"data": {"_target_": "litlab.domains.vision.data.DigitsDataModule"}}
    gcn = Stage("teacher", SimpleNamespace(num_classes=7), cora)  # what the recipe checks
    with pytest.raises(UserError, match="the student's data is image_classification"):
        check_teacher(gcn, digits, SimpleNamespace(dims={"num_classes": 10}))


def test_bad_inputs_exit_2_with_one_line(tmp_path, capfd):
    """compress.py's command (`cli.run(main)`, argv and all) in this process: the refusal is
    the point, not the interpreter (compress.py's subprocess: tests/test_refusals.py)."""
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}}, foreign)
    code, err = run_in_process("compress.py", [f"ckpt_path={foreign}"], tmp_path / "logs", capfd)
    assert code == 2
    assert err.strip().splitlines() == [
        (
            f"error: ckpt_path={foreign} is not a checkpoint written by litlab's train.py "
            f"(no 'litlab_config' entry)"
        )
    ]
    runs = tmp_path / "logs" / "compress" / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # no half-written run dir


def test_steps_after_quantize_or_unknown_steps_are_one_line():
    from litlab.config.after_training import Steps
    from litlab.config.messages import check_model

    with pytest.raises(UserError, match="quantize must be the last step"):
        check_model(Steps, {"quantize": {}, "prune": {}}, "compress")
    with pytest.raises(UserError, match="unknown key compress.shrink"):
        check_model(Steps, {"shrink": {}}, "compress")


TEACHER = pytest.mark.xdist_group("teacher")  # one worker: digits_ckpt built once (loadgroup)


@pytest.fixture(scope="module")
def digits_ckpt(tmp_path_factory):
    """A small CNN trained 3 epochs on digits (the offline default)."""
    from helpers.runs import run_cli

    logs = tmp_path_factory.mktemp("teacher") / "logs"
    run_cli(
        "train.py",
        "trainer.max_epochs=3",
        "data.num_workers=0",
        "model.net.channels=[32,64]",
        log_dir=logs,
    )
    return next((logs / "train" / "runs").glob("*/checkpoints/epoch_*.ckpt"))


def _report(log_dir):
    run = next((log_dir / "compress" / "runs").glob("*"))
    return run, {
        s["stage"]: s for s in json.loads((run / "compress_report.json").read_text())["stages"]
    }


def _evaluated(cli, tmp_path, ckpt) -> float:
    """eval.py's test accuracy of a checkpoint, from its metrics.json (all digits)."""
    cli("eval.py", f"ckpt_path={ckpt}", "predictions=false")
    out = next((tmp_path / "logs" / "eval" / "runs").glob("*/metrics.json"))
    return json.loads(out.read_text())["test/acc"]


@TEACHER
@pytest.mark.slow
def test_pruned_net_is_smaller_evaluates_and_quantizes(tmp_path, cli, digits_ckpt):
    cli(
        "compress.py",
        f"ckpt_path={digits_ckpt}",
        "compress=[prune,quantize]",
        "compress.prune.ratio=0.3",
        "compress.quantize.max_drop=0.05",  # this test's own bound on int8's cost (below)
        "trainer.max_epochs=2",
        *FAST,
        timeout=600,
    )
    run, stages = _report(tmp_path / "logs")
    original, pruned, int8 = stages["original"], stages["prune"], stages["quantize"]
    assert pruned["params"] <= 0.3 * original["params"]
    assert pruned["checkpoint_mb"] < 0.7 * original["checkpoint_mb"]  # + config, hparams
    assert pruned["test/acc"] >= 0.9
    # 8x8 digits, a 30%-sized CNN, 360 test images: int8 costs up to ~3 points (MNIST ResNet-18:
    # 0.2, BENCHMARKS.md); the bound is 5 points (18 images)
    assert abs(int8["test/acc"] - pruned["test/acc"]) <= 0.05
    assert int8["onnx_mb"] <= 0.7 * pruned["onnx_mb"]  # tiny net: QDQ scales weigh (ResNet: 0.25x)
    assert _evaluated(cli, tmp_path, run / "1_prune.ckpt") == pytest.approx(pruned["test/acc"])
    report = (run / "compress_report.md").read_text()
    assert report.startswith("# ") and "| prune |" in report
    from litlab.export.onnx import export_onnx
    from litlab.runs.rebuild import load_run

    model = load_run(run / "1_prune.ckpt").model  # the exporter rebuilds the smaller net too
    assert prune.count_parameters(model.net)[0] == pruned["params"]
    export_onnx(model, (torch.randn(2, 1, 8, 8),), tmp_path / "again.onnx")
    # the int8 file names its run: eval.py scores it on the split compress judged it on
    import litlab

    scored = litlab.evaluate([f"model_path={run / '2_quantize.onnx'}", f"paths.log_dir={tmp_path}"])
    assert scored.metrics["test/acc"] == pytest.approx(int8["test/acc"], abs=1e-6)


@TEACHER
@pytest.mark.slow
def test_distilled_student_trains_and_eval_reproduces_it(tmp_path, cli, digits_ckpt):
    cli(
        "compress.py",
        f"ckpt_path={digits_ckpt}",
        "compress=distill",
        "report.onnx=false",
        "+compress.distill.student.net.channels=[16,32]",
        "compress.distill.max_params_ratio=null",  # as given (27% of the teacher's parameters)
        "trainer.max_epochs=8",
        *FAST,
        timeout=600,
    )
    run, stages = _report(tmp_path / "logs")
    student = stages["distill"]
    assert student["params"] < 0.3 * stages["original"]["params"]
    assert student["test/acc"] >= 0.85 * stages["original"]["test/acc"]
    stored = torch.load(run / "1_distill.ckpt", weights_only=True)["litlab_config"]
    assert stored["model"]["net"]["channels"] == [16, 32]
    assert _evaluated(cli, tmp_path, run / "1_distill.ckpt") == pytest.approx(student["test/acc"])


@TEACHER
@pytest.mark.slow
def test_interrupted_fine_tuning_resumes_with_ckpt_path_last(tmp_path, cli, digits_ckpt):
    fault = [
        "+callbacks.fault._target_=faults.Fault",
        "+callbacks.fault.step=30",
    ]  # epoch 2 of 3 (21 steps each)
    args = ["compress.prune.ratio=0.5", "trainer.max_epochs=3", "report.onnx=false", *FAST]
    env = {"PYTHONPATH": str(ROOT / "tests")}
    killed = cli(
        "compress.py", f"ckpt_path={digits_ckpt}", *args, *fault, env=env, check=False, timeout=600
    )
    assert killed.returncode != 0
    run = next((tmp_path / "logs" / "compress" / "runs").glob("*"))
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "1_prune.ckpt").exists()
    resumed = cli("compress.py", "ckpt_path=last", *args, timeout=600)
    assert "resuming step 1 (prune)" in resumed.stdout
    _, stages = _report(tmp_path / "logs")  # the same run dir, finished
    metrics = (run / "csv").rglob("metrics.csv")
    epochs = {
        int(r.split(",")[0])
        for f in metrics
        for r in f.read_text().splitlines()[1:]
        if r.split(",")[0]
    }
    assert epochs == {0, 1, 2} and stages["prune"]["params"] <= 0.5 * stages["original"]["params"]


# --- a resumed step takes its run's settings; its resume file is data -------------------------
RESUME = pytest.mark.xdist_group("compress_resume")  # one worker builds the files once


@pytest.fixture(scope="module")
def compress_run(tmp_path_factory):
    """A compress run dir as an interrupted prune step leaves it (its last.ckpt holds the
    step's config: ratio 0.5, 2 epochs, no ONNX, data overrides of its own), beside the train
    checkpoint it compresses. Untrained weights: only the files matter here."""
    from omegaconf import OmegaConf, open_dict

    from litlab.compression.steps import training_config
    from litlab.config import build

    base = tmp_path_factory.mktemp("compress_resume")
    train_cfg = compose("train", ["model.net.channels=[8,16]"], output_dir=base / "train")
    with open_dict(train_cfg):
        del train_cfg["hydra"]
    run_cfg = OmegaConf.to_container(train_cfg, resolve=True)
    model = build.model(train_cfg, build.datamodule(train_cfg))
    source = base / "train" / "checkpoints" / "epoch_000.ckpt"
    source.parent.mkdir(parents=True)
    torch.save({"state_dict": model.state_dict(), "litlab_config": run_cfg}, source)
    run = base / "compress_run"
    args = ["compress.prune.ratio=0.5", "trainer.max_epochs=2", "report.onnx=false"]
    cfg = compose("compress", [f"ckpt_path={source}", *args], output_dir=run)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.data_overrides = {"batch_size": 32}
    stored = OmegaConf.to_container(training_config(cfg, run_cfg, 1), resolve=True)
    (run / "checkpoints").mkdir(parents=True)
    (run / ".hydra").mkdir()  # as Hydra makes a run dir: a run's own, which a resume may use
    state = {"state_dict": model.state_dict(), "litlab_config": stored}
    torch.save(state, run / "checkpoints" / "last.ckpt")
    return run


def _resume_file(compress_run, tmp_path, edit=None):
    import shutil

    run = tmp_path / "logs" / "compress" / "runs" / "2026-12-01_00-00-00"
    shutil.copytree(compress_run, run)
    last = run / "checkpoints" / "last.ckpt"
    if edit is not None:
        ckpt = torch.load(last, weights_only=True)
        edit(ckpt["litlab_config"])
        torch.save(ckpt, last)
    return run, last


def _resumed(last, run, *overrides):
    from litlab.compression.recipe import _resumed
    from litlab.config import validate

    cfg = compose("compress", [f"ckpt_path={last}", *overrides], output_dir=run)
    validate.check(cfg, "compress")
    return _resumed(cfg)


@RESUME
def test_a_resumed_step_takes_its_runs_settings_and_not_its_data_folders(compress_run, tmp_path):
    """`ckpt_path=<its last.ckpt>` alone continues with the run's ratio, epochs and report;
    a data folder its data overrides name (a crafted or a colleague's file) is not taken:
    the data is read where this command says, nothing is created there."""
    from litlab.runs.rebuild import load_run

    elsewhere = tmp_path / "elsewhere"
    run, last = _resume_file(
        compress_run, tmp_path, lambda c: c["data_overrides"].update(data_dir=str(elsewhere))
    )
    cfg, resume = _resumed(last, run)
    assert resume["step"] == 1 and cfg.ckpt_path.endswith("epoch_000.ckpt")
    assert cfg.compress.prune.ratio == 0.5 and cfg.trainer.max_epochs == 2
    assert cfg.report.onnx is False and dict(cfg.data_overrides) == {"batch_size": 32}
    loaded = load_run(cfg.ckpt_path, dict(cfg.data_overrides), data_dir=cfg.paths.data_dir)
    assert str(loaded.datamodule.data_dir).startswith(str(cfg.paths.data_dir))
    assert loaded.datamodule.hparams.batch_size == 32
    assert not elsewhere.exists()


@RESUME
def test_a_resumed_step_refuses_a_setting_given_otherwise_naming_both(compress_run, tmp_path):
    run, last = _resume_file(compress_run, tmp_path)
    with pytest.raises(UserError) as err:
        _resumed(last, run, "compress.prune.ratio=0.3")
    assert str(err.value).startswith(
        "ckpt_path: compress.prune.ratio is 0.5 in the run to resume, 0.3 here; drop "
    )
    with pytest.raises(UserError, match=r"^ckpt_path: trainer.max_epochs is 2 in the run to "):
        _resumed(last, run, "trainer.max_epochs=7")
    cfg, _ = _resumed(last, run, "compress.prune.ratio=0.5", "trainer.max_epochs=2")  # the same
    assert cfg.compress.prune.ratio == 0.5


def _written(folder) -> dict:
    """The files below `folder` with their times, but the run dir's lock, log file and .hydra
    (Hydra and the run lock make them before any recipe runs)."""

    return {
        p: p.stat().st_mtime_ns
        for p in folder.rglob("*")
        if p.is_file() and ".hydra" not in p.parts and p.suffix not in (".lock", ".log")
    }


# a crafted or damaged resume file -> what the one line names
COMPRESS_GARBAGE = {
    "step as text": (lambda c: c.update(compress_step="1"), "compress_step=1 is not a step"),
    "step past the chain": (lambda c: c.update(compress_step=99), "compress_step=99"),
    "source not a path": (lambda c: c.update(ckpt_path=123), "its ckpt_path=123"),
    "source not there": (
        lambda c: c.update(ckpt_path="/nonexistent/x.ckpt"),
        "the run to resume has ckpt_path=/nonexistent/x.ckpt: no such checkpoint file",
    ),
    "steps a list": (lambda c: c.update(compress=["prune"]), "compress of type list"),
    "a ratio of the wrong type": (
        lambda c: c["compress"]["prune"].update(ratio="lots"),
        "the run to resume has compress.prune.ratio",
    ),
    "a huge seed": (lambda c: c.update(seed=10**30), "seed"),
    "epochs a list": (lambda c: c["trainer"].update(max_epochs=[1]), "trainer.max_epochs"),
    "a trainer that is not one": (
        lambda c: c["trainer"].update(_target_="shutil.rmtree"),
        "trainer._target_=shutil.rmtree",
    ),
    "data overrides a list": (
        lambda c: c.update(data_overrides=[1]),
        "data_overrides of type list",
    ),
    "an extra field": (lambda c: c.update(evil={"x": 1}), "evil.x is 1 in the run to resume"),
    "an interpolation": (
        lambda c: c["report"].update(budget_s="${oc.env:HOME}"),
        "interpolation or resolver in report.budget_s",
    ),
}


COMPRESS_GARBAGE_FAST = ("step as text", "a trainer that is not one", "an interpolation")


@RESUME
@pytest.mark.parametrize(  # one case of each class fast; the rest in the slow stage
    "case",
    [
        pytest.param(c, marks=() if c in COMPRESS_GARBAGE_FAST else pytest.mark.slow)
        for c in COMPRESS_GARBAGE
    ],
)
def test_a_garbage_compress_resume_file_is_one_line_nothing_written(compress_run, case, tmp_path):
    from litlab.api import run as run_entry
    from litlab.compression.recipe import compress

    edit, named = COMPRESS_GARBAGE[case]
    run, _ = _resume_file(compress_run, tmp_path, edit)
    before = _written(tmp_path)
    with pytest.raises(UserError) as err:
        run_entry("compress", [f"ckpt_path={run}", f"paths.log_dir={tmp_path / 'logs'}"], compress)
    assert "\n" not in str(err.value) and named in str(err.value), str(err.value)
    assert _written(tmp_path) == before


@RESUME
def test_a_compress_resume_writes_nothing_through_a_link_leaving_its_run(compress_run, tmp_path):
    from litlab.api import run as run_entry
    from litlab.compression.recipe import compress

    run, _ = _resume_file(compress_run, tmp_path)
    victim = tmp_path / "victim.md"
    victim.write_text("secret")
    (run / "compress_report.md").symlink_to(victim)
    with pytest.raises(
        UserError, match="outside the run dir, and litlab writes nothing through a link"
    ):
        run_entry("compress", [f"ckpt_path={run}", f"paths.log_dir={tmp_path / 'logs'}"], compress)
    assert victim.read_text() == "secret"
