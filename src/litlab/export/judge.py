"""Whether an exported file may ship (`src/export.py`): fp32 files match the checkpoint, an
int8 file keeps the test metric within the task kind's share."""

from pathlib import Path

from litlab.config.after_training import ExportSettings

#: formats judged by their outputs against the checkpoint's (not by the metric's loss)
FP32 = ("onnx", "pt2")


class Judge:
    """Whether an exported file may ship: fp32 files match the checkpoint's outputs within
    `rtol`; an int8 file loses at most its share of the test metric (`int8_max_drop`, by
    default the task kind's, as compress=quantize judges it)."""

    def __init__(self, model, spec, eager, settings: ExportSettings) -> None:
        from litlab import tasks
        from litlab.export.verify import test_metric

        self.model, self.spec, self.eager, self.rtol = model, spec, eager, settings.rtol
        self.metric = model.hparams.monitor.split("/", 1)[1]
        self.higher_better = model.hparams.monitor_mode == "max"
        self.reference = test_metric(model, spec, eager, self.metric)
        self.int8_max_drop = settings.int8_max_drop
        if self.int8_max_drop is None:
            self.int8_max_drop = tasks.of(spec).quantize_max_drop

    def verify(self, fmt: str, path: Path, row: dict) -> None:
        """The file's outputs and test metric against the checkpoint's, into `row`."""
        from litlab.export.verify import max_diffs, predictor, test_metric

        predict = predictor(fmt, path, self.spec.input_names)
        row |= max_diffs(self.eager, predict, self.spec.held_out)
        row["metric"] = test_metric(self.model, self.spec, predict, self.metric)

    def judge(self, fmt: str, path: Path, row: dict) -> None:
        """`row["ok"]` and its check; an int8 file that lost too much is deleted, and said so."""
        if fmt in FP32:
            row["ok"] = row["max_rel_diff"] <= self.rtol
            row["check"] = f"max rel diff <= {self.rtol:g}"
            return
        metric, reference, allowed = self.metric, self.reference, self.int8_max_drop
        drop = reference - row["metric"] if self.higher_better else row["metric"] - reference
        share = drop / abs(reference) if reference else (0.0 if drop <= 0 else float("inf"))
        row["ok"] = share <= allowed
        row["check"] = (
            f"test/{metric} at most {allowed:.0%} worse than the checkpoint's "
            f"(int8_max_drop={allowed:g})"
        )
        if not row["ok"]:  # an int8 file that lost accuracy is not an artifact to ship
            path.unlink()
            row |= {"written": False, "drop": drop}
            row["skipped"] = (
                f"{fmt}: not written: test/{metric} {row['metric']:.4f} is {share:.2%} worse "
                f"than the checkpoint's {reference:.4f} (int8_max_drop={allowed:g}, a share); "
                "the fp32 formats are the ones to use"
            )
