"""See inside a run: one digits run with `callbacks=inspect`, MLflow, the LR finder and the
PyTorch profiler, checked file by file against the run's own numbers (docs/inspect.md)."""

import csv
import json
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.runs import csv_test_metrics, results, run_cli, run_dirs

from litlab.config.compose import compose

# one worker runs this module, so its module-scoped fixtures are built once (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("inspect")

MAX_POINTS, LR_RANGE = 100, (1e-5, 0.5)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One short run with everything on; returns (run dir, stdout + stderr, log dir)."""
    logs = tmp_path_factory.mktemp("inspect") / "logs"
    proc = run_cli(
        "train.py",
        "callbacks=inspect",
        "logger=[csv,tensorboard,mlflow]",
        "profiler=pytorch",
        "tune=lr",
        "tune.lr_find.num_training=20",
        f"tune.lr_find.min_lr={LR_RANGE[0]}",
        f"tune.lr_find.max_lr={LR_RANGE[1]}",
        "trainer.max_epochs=2",
        "callbacks.histograms.every_n_epochs=1",
        f"callbacks.embeddings.max_points={MAX_POINTS}",
        "callbacks.gradcam.num_samples=4",
        "callbacks.sample_predictions.num_samples=8",
        log_dir=logs,
    )
    return run_dirs(logs)[-1], proc.stdout + proc.stderr, logs


def digits_test_size(tmp_path) -> int:
    from litlab.config import build

    dm = build.datamodule(compose("train", [], output_dir=tmp_path))
    dm.setup("test")
    return len(dm.test_set)


def read_csv(path) -> list[list[str]]:
    with open(path) as f:
        return list(csv.reader(f))


@pytest.mark.slow  # shares the `run` fixture (one full inspect run): .ci/run's slow stage
def test_confusion_matrix_counts_the_test_set_and_matches_test_acc(run, tmp_path):
    run_dir, _, _ = run
    rows = read_csv(run_dir / "inspect" / "confusion_test.csv")
    counts = [[int(v) for v in row[1:]] for row in rows[1:]]
    total = sum(map(sum, counts))
    diagonal = sum(counts[k][k] for k in range(len(counts)))
    assert total == digits_test_size(tmp_path)
    assert diagonal / total == pytest.approx(csv_test_metrics(run_dir)["test/acc"], abs=1e-6)
    per_class = read_csv(run_dir / "inspect" / "per_class_test.csv")
    assert per_class[0] == ["class", "precision", "recall", "f1", "support"]
    for k, row in enumerate(per_class[1:]):
        assert int(row[4]) == sum(counts[k])
        assert float(row[2]) == pytest.approx(counts[k][k] / sum(counts[k]), abs=1e-4)
    for name in (
        "confusion_val.png",
        "confusion_val.csv",
        "gradcam.png",
        "samples.png",
        "tsne.png",
    ):
        assert (run_dir / "inspect" / name).stat().st_size > 200, name


@pytest.mark.slow  # shares the `run` fixture (one full inspect run): .ci/run's slow stage
def test_tsne_holds_the_configured_number_of_points(run):
    run_dir, _, _ = run
    rows = read_csv(run_dir / "inspect" / "tsne.csv")
    assert rows[0] == ["x", "y", "label"] and len(rows) - 1 == MAX_POINTS
    assert len({r[2] for r in rows[1:]}) > 5  # coloured by class: several classes present
    projector = list((run_dir / "tensorboard").rglob("metadata.tsv"))
    assert len(projector) == 1 and len(projector[0].read_text().splitlines()) == MAX_POINTS


@pytest.mark.slow  # shares the `run` fixture (one full inspect run): .ci/run's slow stage
def test_histograms_for_every_parameter_tensor_and_images_in_tensorboard(run, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from litlab.config import build

    run_dir, _, _ = run
    cfg = compose("train", [], output_dir=tmp_path)
    names = [n for n, _ in build.model(cfg, build.datamodule(cfg)).named_parameters()]
    events = EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={"histograms": 0, "images": 0}
    )
    tags = events.Reload().Tags()
    assert {f"weights/{n}" for n in names} | {f"grads/{n}" for n in names} <= set(
        tags["histograms"]
    )
    assert len(events.Histograms(f"weights/{names[0]}")) == 2  # every_n_epochs=1, 2 epochs
    assert tags["graph"]
    assert {"inspect/confusion_test", "inspect/gradcam", "inspect/tsne"} <= set(tags["images"])


@pytest.mark.slow  # shares the `run` fixture (one full inspect run): .ci/run's slow stage
def test_lr_finder_suggestion_is_in_range_and_is_the_lr_trained_with(run):
    run_dir, stdout, _ = run
    found = json.loads((run_dir / "tune" / "lr.json").read_text())
    lr = found["lr"]
    assert LR_RANGE[0] <= lr <= LR_RANGE[1]
    assert f"suggested lr {lr:.4g}" in stdout
    assert (run_dir / "tune" / "lr_find.png").exists()
    with open(run_dir / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    used = [float(r["lr-AdamW"]) for r in rows if r.get("lr-AdamW")]
    assert used[0] == pytest.approx(lr, rel=1e-9)  # the first epoch's lr (cosine starts there)
    assert [float(r["tune/lr"]) for r in rows if r.get("tune/lr")] == [pytest.approx(lr)]


@pytest.mark.slow  # shares the `run` fixture (one full inspect run): .ci/run's slow stage
def test_pytorch_profiler_tables_name_the_convolution_and_memory(run):
    run_dir, stdout, _ = run
    report = (run_dir / "profiler" / "fit-profiler.txt").read_text()
    assert "aten::convolution" in report or "aten::mkldnn_convolution" in report
    assert "sorted by self_cpu_memory_usage" in report
    assert "FIT Profiler Report" in stdout  # printed at the end of fit, not only written
    # the native libraries' noise on a CPU machine stays off the console (run_end.RunEnd.run)
    assert "gpuGetDeviceCount" not in stdout and "allocated before the profiling" not in stdout
    assert f"profiler         {run_dir / 'profiler' / 'fit-profiler.txt'}" in stdout  # Files
    assert list((run_dir / "profiler").glob("fit-*.pt.trace.json"))
    with open(run_dir / "csv" / "metrics.csv") as f:
        peaks = [
            float(r["memory/peak_rss_mb"]) for r in csv.DictReader(f) if r.get("memory/peak_rss_mb")
        ]
    assert len(peaks) == 2 and all(p > 50 for p in peaks)  # one per epoch, in MB


@pytest.mark.slow  # shares the `run` fixture (one full inspect run): .ci/run's slow stage
def test_mlflow_run_reads_back_with_params_metrics_and_artifacts(run, monkeypatch):
    import mlflow

    _, stdout, logs = run
    store = (
        f"sqlite:///{(logs / 'mlflow.db').resolve()}"  # the SQLite store, one experiment per task
    )
    client = mlflow.MlflowClient(store)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)  # set_tracking_uri exports it: restored
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=["train"])
    assert len(runs) == 1
    found = runs.iloc[0]
    assert found["params.data/batch_size"] == "64" and found["params.model/_target_"].endswith(
        "ImageClassifier"
    )
    assert found["metrics.test/acc"] == pytest.approx(results(stdout)[0]["test/acc"], abs=1e-4)
    assert len(client.get_metric_history(found.run_id, "val/acc")) == 2  # per epoch
    artifacts = {
        f.path
        for folder in ("plots", "config", "checkpoints")
        for f in client.list_artifacts(found.run_id, folder)
    }
    assert {"plots/confusion_test.png", "plots/tsne.png", "config/config.yaml"} <= artifacts
    assert any(a.startswith("checkpoints/epoch_") for a in artifacts)


def test_a_callback_that_does_not_fit_the_task_is_refused_in_one_line(tmp_path):
    from litlab.config import build
    from litlab.errors import UserError

    cfg = compose("train", ["model=gnn", "data=karate", "callbacks=gradcam"], output_dir=tmp_path)
    with pytest.raises(UserError) as err:
        build.check_compatible(cfg)
    assert "callbacks.gradcam" in str(err.value) and "node_classification" in str(err.value)
    assert "\n" not in str(err.value)
    # callbacks=inspect leaves out what does not fit instead
    cfg = compose("train", ["model=gnn", "data=karate", "callbacks=inspect"], output_dir=tmp_path)
    kept = build.fitting_callbacks(cfg)
    assert {"confusion_matrix", "embeddings", "sample_predictions", "histograms"} <= set(kept)
    assert not {"gradcam", "model_graph"} & set(kept)


def test_lr_finder_takes_all_its_steps_in_a_run_shorter_than_them(tmp_path, capfd):
    """1 epoch of 4 batches, a 20-step search: the finder cycles the data for all 20 steps
    (it used to stop with the epochs, at 4: "no falling range", the config's lr kept), prints
    the lr it trains with, and the checkpoint's run config holds that lr."""
    import torch

    from litlab import train

    result = train(
        [
            f"paths.log_dir={tmp_path}",
            "tune=lr",
            "tune.lr_find.num_training=20",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=4",
            "trainer.limit_val_batches=1",
            "trainer.num_sanity_val_steps=0",
            "test=false",
            "callbacks.rich_progress_bar=null",
        ]
    )
    out = capfd.readouterr().out
    found = json.loads((result.run_dir / "tune" / "lr.json").read_text())
    lr = found["lr"]
    assert len(found["results"]["lr"]) == 20
    [line] = [x for x in out.splitlines() if x.startswith("LR finder:")]
    assert line.startswith(f"LR finder: suggested lr {lr:.4g}, ")
    assert line.endswith("in 20 steps, 5.0 passes over the 4 training batches); training with it")
    ckpt = torch.load(result.best_checkpoint, weights_only=True)
    assert ckpt["litlab_config"]["model"]["optimizer"]["lr"] == lr != 0.005  # cnn.yaml's lr
    assert ckpt["optimizer_states"][0]["param_groups"][0]["initial_lr"] == pytest.approx(lr)


def test_lr_finder_says_when_the_data_gave_fewer_steps_and_keeps_the_lr(monkeypatch, caplog):
    """A search that ended short of its steps without diverging (no training batches): one
    warning line with the count, the config's lr kept and nothing reported."""
    import functools

    import torch
    from lightning.pytorch import tuner as lightning_tuner

    from litlab.runs.tuning import LearningRateFinder

    lrs = np.logspace(-6, 0, 30).tolist()
    curve = SimpleNamespace(results={"lr": lrs, "loss": np.linspace(2.3, 2.0, 30).tolist()})
    monkeypatch.setattr(lightning_tuner.Tuner, "lr_find", lambda self, *a, **k: curve)
    optimizer = functools.partial(torch.optim.AdamW, lr=0.005)
    model = SimpleNamespace(optimizer=optimizer)
    trainer = SimpleNamespace(
        fit_loop=SimpleNamespace(max_epochs=2), num_training_batches=0, loggers=[]
    )
    assert LearningRateFinder()(trainer, model, None) is None
    assert model.optimizer is optimizer and trainer.fit_loop.max_epochs == 2
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == (
        "LR finder: the training data gave 30 of its 100 steps (0 batches per epoch: check "
        "the data and trainer.limit_train_batches); keeping the config's lr 0.005"
    )


@pytest.mark.parametrize(
    "overrides,line",
    [
        (
            ["tune.lr_find.num_training=5"],
            "tune.lr_find.num_training=5 has the wrong type or value; valid: an integer >= 20",
        ),
        (
            ["tune.lr_find.min_lr=0.1", "tune.lr_find.max_lr=0.01"],
            "tune.lr_find.min_lr=0.1 is not below tune.lr_find.max_lr=0.01",
        ),
        (["tune.lr_find.spacing=log"], "valid: exponential | linear"),
        (["tune.lr_find.early_stop_threshold=1"], "valid: a number > 1 or null"),
        (["tune.lr_find.max_lr=0"], "tune.lr_find.max_lr=0 has the wrong type or value"),
    ],
)
def test_lr_finder_settings_that_cannot_give_a_curve_are_one_line(overrides, line, tmp_path):
    """Refused before the run starts (one line, no run dir: `refused`), not found out after a
    search that could not say anything."""
    from helpers.refusals import refused

    from litlab.recipes import train_and_test

    message, _ = refused("train", ["tune=lr", *overrides], train_and_test, tmp_path / "logs")
    assert line in message, message


def test_tuning_is_refused_under_ddp():
    from litlab.errors import UserError
    from litlab.runs import tuning

    DDPStrategy = type("DDPStrategy", (), {})
    with pytest.raises(UserError, match="cannot run under DDPStrategy"):
        tuning.run_tuners(
            [lambda *a: None], SimpleNamespace(strategy=DDPStrategy(), world_size=2), None, None
        )


def test_optional_loggers_are_configured_offline(tmp_path):
    """What runs wherever the optional packages are absent: their configs keep data local."""
    run = tmp_path / "run"
    cfg = compose("train", [f"paths.log_dir={tmp_path}", "logger=[comet,neptune,aim]"], run)
    assert cfg.logger.comet.online is False
    assert cfg.logger.comet.offline_directory == f"{run}/comet"
    assert cfg.logger.neptune.offline is True
    assert cfg.logger.aim.repo == f"{tmp_path}/aim"


@pytest.mark.parametrize(
    "logger,package", [("comet", "comet_ml"), ("neptune", "neptune"), ("aim", "aim")]
)
def test_optional_logger_offline(logger, package, cli, tmp_path):
    pytest.importorskip(
        package,
        reason=f"optional: {package} is not installed (pip install -r requirements-optional.txt)",
    )
    cli(
        "train.py",
        f"logger=[csv,{logger}]",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        env={"COMET_API_KEY": ""},
    )
    assert csv_test_metrics(run_dirs(tmp_path / "logs")[-1])["test/acc"] > 0


@pytest.mark.parametrize(
    "override,key,target",
    [
        ("profiler=simple", "trainer.profiler", "PrintedSimpleProfiler"),
        ("profiler=advanced", "trainer.profiler", "PrintedAdvancedProfiler"),
        ("profiler=pytorch", "callbacks.peak_memory", "PeakMemory"),
        ("debug=profiler", "trainer.profiler", "PrintedSimpleProfiler"),
        ("tune=batch_size", "tune.batch_size_find", "BatchSizeFinder"),
        ("logger=many", "logger.mlflow", "LocalMLFlowLogger"),
    ],
)
def test_options_compose_to_their_classes(override, key, target, tmp_path):
    from omegaconf import OmegaConf

    cfg = compose("train", [override], output_dir=tmp_path)
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    assert OmegaConf.select(cfg, key)._target_.endswith(target)


def test_vanishing_gradient_is_named_in_one_warning_line(tmp_path, caplog):
    import torch
    from torch import nn

    from litlab.callbacks.inspect import WeightGradHistograms

    net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    net[1].weight.grad *= 1e-5  # 100,000x below the median layer's norm
    trainer = SimpleNamespace(
        current_epoch=0,
        global_step=0,
        is_global_zero=True,
        loggers=[],
        default_root_dir=str(tmp_path),
    )
    callback = WeightGradHistograms(every_n_epochs=1)
    callback.on_train_epoch_start(trainer, net)
    with caplog.at_level("WARNING"):
        callback.on_before_optimizer_step(trainer, net, None)
        callback.on_before_optimizer_step(trainer, net, None)  # once per checked epoch
    warned = [r.getMessage() for r in caplog.records if "gradient norms" in r.getMessage()]
    assert len(warned) == 1 and "vanishing in 1.weight" in warned[0]
    assert "exploding" not in warned[0] and "\n" not in warned[0]
