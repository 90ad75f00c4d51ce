"""What a new user reads: a short header instead of the config tree (saved to the run dir), no
advertisements or warnings that do not apply, sweep summaries that cannot be misread, and
case ids that match between predictions.csv and the masks."""

import csv
from pathlib import Path

import pytest
from helpers.runs import run_dirs

from litlab.config.compose import compose

TINY = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0",
]
NOISE = ("💡 Tip", "Be aware that when using `ckpt_path`", "was configured so 100% of the batches")


@pytest.mark.slow  # a train and an eval subprocess: .ci/run's slow stage
def test_train_and_eval_print_a_header_and_save_the_config_tree(cli, tmp_path):
    train = cli("train.py", *TINY, quiet=False)
    run = run_dirs(tmp_path / "logs")[0]
    first = train.stdout.splitlines()[:3]
    assert first[0] == "train: data=digits model=cnn trainer=default logger=csv", first
    assert first[1].split()[:2] == ["threads", "1"]  # the test suite's OMP_NUM_THREADS=1
    assert first[2].split()[:3] == ["run", "dir", str(run)]
    assert "CONFIG" not in train.stdout  # the tree is in the run dir, not on the screen
    tree = (run / "config_tree.txt").read_text()
    assert tree.startswith("CONFIG") and "litlab.domains.vision.data.DigitsDataModule" in tree
    assert all(line == line.rstrip() for line in tree.splitlines())
    ckpt = next((run / "checkpoints").glob("epoch_*.ckpt"))
    evaluate = cli("eval.py", f"ckpt_path={ckpt}", quiet=False)
    assert evaluate.stdout.startswith(f"eval: trainer=default\n  checkpoint  {ckpt}\n")
    for output in (train.stdout + train.stderr, evaluate.stdout + evaluate.stderr):
        assert not [n for n in NOISE if n in output], output[-3000:]


def test_print_config_brings_the_tree_back(tmp_path, capsys):
    from litlab.runs import summary as report

    for shown in (False, True):
        cfg = compose("train", [f"extras.print_config={shown}"], output_dir=tmp_path / str(shown))
        report.apply_extras(cfg)
        out = capsys.readouterr().out
        assert ("DigitsDataModule" in out) is shown and "run dir" in out
        assert (tmp_path / str(shown) / "config_tree.txt").is_file()


def test_summary_csv_has_a_column_per_override_and_marks_logged_values(tmp_path):
    from litlab.sweeps.summary import write_summary

    records = [
        {
            "job": i,
            "overrides": [f"model.optimizer.lr={lr}", f"seed={i}", "~logger"],
            "objective_name": "val/acc",
            "mode": "max",
            "run_dir": str(tmp_path / str(i)),
            "status": "completed",
            "objective": acc,
            "error": "",
            "wall_s": 1.0,
            "metrics": {"val/acc": acc, "lr-AdamW": lr / 4},
        }
        for i, (lr, acc) in enumerate([(0.01, 0.9), (0.001, 0.8)])
    ]
    write_summary(tmp_path, records, plot=False)
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["model.optimizer.lr"] for r in rows] == ["0.01", "0.001"]
    assert [r["seed"] for r in rows] == ["0", "1"] and rows[0]["logger"] == "(deleted)"
    assert "lr-AdamW" not in rows[0]  # the last logged lr is not the job's lr setting
    assert float(rows[0]["logged/lr-AdamW"]) == 0.0025 and rows[0]["best"] == "*"


@pytest.mark.slow  # MONAI's import and a sliding-window pass: ~10 s of CPU
def test_unet3d_predictions_use_the_case_ids_of_the_mask_files(tmp_path):
    from litlab.config import build
    from litlab.runs.summary import write_csv

    cfg = compose(
        "train",
        [
            "model=unet3d",
            "data.num_volumes=8",
            "data.size=16",
            "data.size_jitter=0",
            "data.patch_size=[16,16,16]",
            "model.net.channels=[4,8]",
            "model.net.strides=[2]",
            "model.net.num_res_units=0",
        ],
        output_dir=tmp_path / "run",
    )
    dm = build.datamodule(cfg)
    model = build.model(cfg, dm)
    model.mask_dir = tmp_path / "masks"
    dm.setup("test")
    batches = [model.predict_step(b, i) for i, b in enumerate(dm.test_dataloader())]
    write_csv(batches, tmp_path / "predictions.csv")
    with open(tmp_path / "predictions.csv") as f:
        cases = [row["case"] for row in csv.DictReader(f)]
    masks = sorted(p.name.removesuffix(".nii.gz") for p in Path(tmp_path / "masks").iterdir())
    assert sorted(cases) == masks and all(c.startswith("case_00") for c in cases), cases
