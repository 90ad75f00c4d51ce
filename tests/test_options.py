"""The README's options of the image classifier and of eval.py, each checked by its effect:
label smoothing, mixup, cutmix, Xavier init, EMA weights (validation and the checkpoint use
the average), torch.compile, eval's `split=val` and `data_overrides`. In process: one tiny
digits run (module fixture) serves every eval check."""

import json

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from litlab.config.compose import compose

QUIET = ["extras.print_config=false", "callbacks.rich_progress_bar=null"]
# 2 epochs of 5 batches; EMA on (decay 0.8: the average visibly differs from the raw weights)
EMA_RUN = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=5",
    "model.ema_decay=0.8",
    "callbacks.early_stopping=null",
    "logger=csv",
    *QUIET,
]


def classifier(tmp_path, *overrides):
    """The digits classifier and one training batch, built from config as train.py does."""
    from litlab.config import build

    cfg = compose("train", [*overrides, *QUIET], output_dir=tmp_path)
    dm = build.datamodule(cfg)
    model = build.model(cfg, dm)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    return model, x, y


def record_step(model, x, y, monkeypatch) -> dict:
    """Run training_step; return the loss and what reached the net and the loss function."""
    seen = {}
    hook = model.net.register_forward_pre_hook(lambda net, args: seen.update(x=args[0]))

    real = F.cross_entropy

    def cross_entropy(logits, target, **kwargs):
        seen.update(logits=logits, target=target, **kwargs)
        return real(logits, target, **kwargs)

    monkeypatch.setattr("litlab.domains.vision.module.F.cross_entropy", cross_entropy)
    torch.manual_seed(0)
    seen["loss"] = model.training_step((x, y), 0)
    hook.remove()
    return seen


def test_label_smoothing_is_the_loss_of_a_step(tmp_path, monkeypatch):
    model, x, y = classifier(tmp_path, "model.label_smoothing=0.1")
    seen = record_step(model, x, y, monkeypatch)
    logits = seen["logits"].detach()
    assert seen["label_smoothing"] == 0.1 and torch.equal(seen["target"], y)
    assert torch.isclose(seen["loss"], F.cross_entropy(logits, y, label_smoothing=0.1))
    assert not torch.isclose(seen["loss"], F.cross_entropy(logits, y))


def mixing_weight(target: torch.Tensor, y: torch.Tensor) -> float:
    """lam of soft labels lam * onehot(y) + (1 - lam) * onehot(neighbour's y), as torchvision
    mixes each image with the previous one of the batch; checks every row has that form."""
    i = (y != y.roll(1, 0)).nonzero()[0, 0]
    lam = float(target[i, y[i]])
    expected = lam * F.one_hot(y, 10) + (1 - lam) * F.one_hot(y.roll(1, 0), 10)
    assert torch.allclose(target, expected.float(), atol=1e-6)
    return lam


def test_mixup_mixes_images_and_targets(tmp_path, monkeypatch):
    model, x, y = classifier(tmp_path, "model.mixup_alpha=0.4")
    seen = record_step(model, x, y, monkeypatch)
    lam = mixing_weight(seen["target"], y)
    assert 0 < lam < 1
    assert torch.allclose(seen["x"], lam * x + (1 - lam) * x.roll(1, 0), atol=1e-5)


def test_cutmix_pastes_one_box_of_the_neighbour_image(tmp_path, monkeypatch):
    model, x, y = classifier(tmp_path, "model.cutmix_alpha=1.0")
    seen = record_step(model, x, y, monkeypatch)
    lam = mixing_weight(seen["target"], y)
    assert 0 < lam < 1
    own = (seen["x"] == x).all(0).all(0)  # (H, W): pixels kept in every image
    pasted = (seen["x"] == x.roll(1, 0)).all(0).all(0) & ~own  # the neighbour's, where different
    assert (own | (seen["x"] == x.roll(1, 0)).all(0).all(0)).all()  # nothing else
    rows, cols = pasted.any(1).nonzero()[:, 0], pasted.any(0).nonzero()[:, 0]
    box_area = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
    assert 0 < box_area <= round((1 - lam) * own.numel())  # lam = 1 - box area / image area


@pytest.mark.parametrize("xavier", [False, True])
def test_xavier_init_sets_the_initial_weights(tmp_path, xavier):
    """Xavier-uniform bounds sqrt(6 / (fan_in + fan_out)); PyTorch's default (Kaiming, a=sqrt 5)
    bounds 1 / sqrt(fan_in), smaller for these layers; Xavier also zeroes the head's bias."""
    model, _, _ = classifier(tmp_path, f"model.net.xavier_init={xavier}")
    conv = model.net.features[1][0]  # 32 -> 64 channels, 3x3
    fan_in, fan_out = 32 * 9, 64 * 9
    xavier_bound, default_bound = (6 / (fan_in + fan_out)) ** 0.5, 1 / fan_in**0.5
    largest = conv.weight.abs().max().item()
    head = model.net.head[-1]
    if xavier:
        assert default_bound < largest <= xavier_bound and not head.bias.any()
    else:
        assert largest <= default_bound and head.bias.any()


# the tests of one ema_run run on one worker, so it is built once (--dist loadgroup)
EMA_GROUP = pytest.mark.xdist_group("ema_run")


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    """A tiny digits run with model.ema_decay, trained in this process."""
    from litlab.recipes import train_and_test

    out = tmp_path_factory.mktemp("ema_run")
    metrics = train_and_test(compose("train", EMA_RUN, output_dir=out)).metrics
    return out, metrics


def evaluate(tmp_path, ckpt, *overrides) -> tuple[dict, pd.DataFrame]:
    from litlab.export.evaluate import evaluate_checkpoint as run_eval

    out = tmp_path / "eval"
    metrics = run_eval(
        compose(
            "eval", [f"ckpt_path={ckpt}", "extras.print_config=false", *overrides], output_dir=out
        )
    ).metrics
    assert json.loads((out / "metrics.json").read_text()) == pytest.approx(metrics)
    rows = out / "predictions.csv"
    return metrics, (pd.read_csv(rows) if rows.exists() else None)


@EMA_GROUP
def test_ema_weights_are_validated_tested_and_saved(ema_run, tmp_path):
    """A checkpoint's state_dict is the average; the val/loss logged during training is that of
    the average (eval.py reproduces it), not that of the raw weights; train.py's test too."""
    run, train_metrics = ema_run
    best = next((run / "checkpoints").glob("epoch_*.ckpt"))
    ckpt = torch.load(best, weights_only=True)
    raw, average = ckpt["current_model_state"], ckpt["state_dict"]
    assert any(not torch.equal(raw[k], average[k]) for k in average if k.startswith("net."))
    logged = pd.read_csv(run / "csv" / "metrics.csv").dropna(subset=["val/loss"])
    val_loss = logged.loc[logged.epoch == ckpt["epoch"], "val/loss"].item()
    on_average, _ = evaluate(tmp_path, best, "split=val", "predictions=false")
    assert on_average["val/loss"] == pytest.approx(val_loss, rel=1e-5)

    raw_ckpt = tmp_path / "raw.ckpt"
    torch.save({**ckpt, "state_dict": raw}, raw_ckpt)
    on_raw, _ = evaluate(tmp_path / "raw", raw_ckpt, "split=val", "predictions=false")
    assert on_raw["val/loss"] != pytest.approx(val_loss, rel=1e-3)
    # train.py's test of its best checkpoint used the average too (what eval.py reports)
    tested, _ = evaluate(tmp_path / "best", best, "predictions=false")
    assert tested["test/loss"] == pytest.approx(train_metrics["test/loss"], rel=1e-5)


@EMA_GROUP
def test_eval_split_val_scores_and_predicts_the_validation_split(ema_run, tmp_path):
    run, _ = ema_run
    metrics, rows = evaluate(tmp_path, run / "checkpoints" / "last.ckpt", "split=val")
    assert set(metrics) == {"val/acc", "val/f1", "val/loss"}
    assert len(rows) == 144  # 10% of the 1,437 digits left after the test split
    assert (rows.target == rows.pred).mean() == pytest.approx(metrics["val/acc"], abs=1e-6)


@EMA_GROUP
def test_eval_data_overrides_change_the_stored_data_config(ema_run, tmp_path):
    """batch_size changes nothing but speed (same metrics); test_fraction changes the split."""
    run, _ = ema_run
    last = run / "checkpoints" / "last.ckpt"
    plain, rows = evaluate(tmp_path / "a", last)
    small, _ = evaluate(tmp_path / "b", last, "+data_overrides.batch_size=7")
    assert len(rows) == 360 and small == pytest.approx(plain, rel=1e-5)
    _, bigger = evaluate(tmp_path / "c", last, "+data_overrides.test_fraction=0.5")
    assert len(bigger) == 899


def test_compile_wraps_the_forward_and_keeps_checkpoint_keys(tmp_path):
    """model.compile=true: the net runs through torch.compile; state-dict keys stay those of
    the plain net, so checkpoints load either way."""
    model, _, _ = classifier(tmp_path, "model.compile=true")
    plain, _, _ = classifier(tmp_path / "plain")
    model.setup("fit")
    assert isinstance(model._forward, torch._dynamo.eval_frame.OptimizedModule)
    assert model._forward._orig_mod is model.net
    keys = model.state_dict().keys()
    assert keys == plain.state_dict().keys() and all(k.startswith("net.") for k in keys)
    plain.load_state_dict(model.state_dict())  # strict: a compiled run's checkpoint loads
    plain.setup("fit")
    assert plain._forward is plain.net
    old = {**{f"_forward.{k[4:]}": v for k, v in plain.state_dict().items()}, **plain.state_dict()}
    checkpoint = {"state_dict": old}  # written before the fix: the net's weights twice
    plain.on_load_checkpoint(checkpoint)
    assert checkpoint["state_dict"].keys() == keys


@pytest.mark.slow
def test_compiled_forward_equals_the_plain_one(tmp_path):
    """A real compile (inductor, a C compiler: tens of seconds on a CPU)."""
    model, x, _ = classifier(tmp_path, "model.compile=true")
    model.setup("fit")
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), model.net(x), atol=1e-5)
