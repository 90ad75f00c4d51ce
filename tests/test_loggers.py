"""`logger=many` writes CSV, TensorBoard and (offline, no account) W&B files into the run dir."""

from helpers.runs import run_dirs


def test_every_logger_writes_into_the_run_dir(cli, tmp_path):
    cli(
        "train.py",
        "logger=many",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=4",
        env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )
    run = run_dirs(tmp_path / "logs")[-1]
    header = (run / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert {"val/acc", "val/f1", "train/loss", "epoch"} <= set(header.split(","))
    assert "model/params/total" in (run / "csv" / "hparams.yaml").read_text()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert list((run / "wandb").glob("offline-run-*/run-*.wandb"))
