"""One page of console: the default run fits on a screen, every library's INFO line and warning
goes to the run's log file instead, no line is printed twice, and the tuners' and compress's
temporary checkpoints are saved and read with `weights_only` set (no Lightning notice)."""

import logging
import re
import warnings

import pytest
import torch
from helpers.runs import ROOT, results, run_cli, run_dirs

from litlab import console
from litlab.callbacks.summary import compact_columns, totals_line

LIBRARY_LINES = ("Seed set to", "GPU available", "Instantiating datamodule", "Restoring states")
NOISE = ("💡 Tip", "LeafSpec", "Unstructured pruning", "weights_only", "INFO", "Test metric")


def non_empty(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def repeated(lines: list[str]) -> list[str]:
    """Lines printed more than once (progress bars redraw in place: not counted)."""
    seen, twice = set(), []
    for line in lines:
        if line in seen and not re.match(r"^\s*(Epoch|Testing|Validation|Predicting)\b", line):
            twice.append(line)
        seen.add(line)
    return twice


def readme_results(capability: str) -> dict[str, float] | None:
    """The README's figures of `python src/train.py threads=1` on this CPU: its sample output of
    `make train` on AVX-512, the line it gives for a CPU without AVX-512 (AVX2), None for a CPU
    it gives none for (the float sums of oneDNN's kernels differ by instruction set)."""
    readme = ROOT.joinpath("README.md").read_text()
    if capability.startswith("AVX512"):
        return results(readme.split("make train", 1)[1])[0]
    if capability == "AVX2":
        [line] = re.findall(r"`(test +acc [^`]+)`, and the suite checks those there", readme)
        return results(f"\nResults\n  {line}\n")[0]
    return None


def test_default_run_prints_one_page_and_the_readme_figures(tmp_path):
    """`python src/train.py threads=1` as it is (30 epochs, progress bar on): at most 30
    non-empty lines, none twice, the library lines in train.log only, and the README's sample
    test metrics."""
    proc = run_cli("train.py", "threads=1", log_dir=tmp_path / "logs", quiet=False, timeout=600)
    lines = non_empty(proc.stdout + proc.stderr)
    assert len(lines) <= 30, "\n".join(lines)
    assert not repeated(lines), repeated(lines)
    assert not [n for n in NOISE if n in proc.stdout + proc.stderr]
    assert "MetricCollection" not in proc.stdout and "FLOPs" not in proc.stdout
    assert re.search(r"^\s*net\s+SmallCNN\s+94\.2 K", proc.stdout, re.MULTILINE)
    assert proc.stdout.count("\nResults\n") == 1 and proc.stdout.count("\nFiles\n") == 1
    log = (run_dirs(tmp_path / "logs")[-1] / "train.log").read_text()
    assert all(text in log for text in LIBRARY_LINES), log[-3000:]
    capability = torch.backends.cpu.get_cpu_capability()
    measured, documented = results(proc.stdout)[0], readme_results(capability)
    if documented is None:
        pytest.skip(f"the README gives no figures for a CPU whose capability is {capability}")
    # 1 thread here as in the README: the same figures, up to one of the 360 test digits (the
    # 4 printed decimals round) and a loss within 5% (one twice as large fails)
    for key in ("test/acc", "test/f1"):
        assert measured[key] == pytest.approx(documented[key], abs=1 / 360 + 5e-5), (key, measured)
    assert measured["test/loss"] == pytest.approx(documented["test/loss"], rel=0.05), measured


def test_console_filter_keeps_litlab_and_warnings_drops_library_info_and_deprecations():
    keep, drop = console.ConsoleFilter().filter, []

    def record(name, level, msg, **extra):
        rec = logging.LogRecord(name, level, __file__, 1, msg, (), None)
        rec.__dict__.update(extra)
        return rec

    assert keep(record("litlab.federated.federation", logging.INFO, "round 1/3"))
    assert keep(record("hydra.core.utils", logging.INFO, "#1 : seed=2"))
    assert keep(record("lightning.pytorch.x", logging.WARNING, "dataloader has few workers"))
    assert keep(record("py.warnings", logging.WARNING, "x", category=UserWarning))
    drop += [
        record("lightning.pytorch.utilities.rank_zero", logging.INFO, "GPU available: False"),
        record("litlab.config.build", logging.INFO, "Instantiating", **console.FILE_ONLY),
        record("py.warnings", logging.WARNING, "old api", category=DeprecationWarning),
        record("py.warnings", logging.WARNING, "soon", category=FutureWarning),
        record("lightning.pytorch", logging.WARNING, "💡 Tip: try litmodels"),
        record("onnx_ir", logging.INFO, "pass applied"),
        # Hydra's error for a name it cannot locate, before it raises what litlab says in one
        # line (a checkpoint's stored net from a module that is gone printed it twice)
        record("hydra.utils", logging.ERROR, "Error getting object at a.b : Error loading\nx"),
    ]
    assert not any(keep(r) for r in drop)


def test_setup_sends_warnings_to_the_log_file_in_one_console_line(tmp_path, capsys):
    root = logging.getLogger()
    handlers, shown, level = root.handlers[:], warnings.showwarning, root.level
    root.setLevel(logging.INFO)  # as Hydra's job logging sets it
    screen = logging.StreamHandler()  # stderr, as Hydra's console handler
    file = logging.FileHandler(tmp_path / "run.log")
    root.handlers = [screen, file]
    try:
        console.setup()
        # a library logger no other test configures (lightning.pytorch's level is set by Lightning)
        logging.getLogger("somelib.module").info("Seed set to 1")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = console._show_warning  # catch_warnings restored Python's
            warnings.warn("an old call", DeprecationWarning, stacklevel=1)
            warnings.warn("few workers\nsecond line", UserWarning, stacklevel=1)
    finally:
        root.handlers, warnings.showwarning = handlers, shown
        root.setLevel(level)
        file.close()
    err = capsys.readouterr().err
    assert err.splitlines() == ["warning: few workers (UserWarning)"], err
    log = (tmp_path / "run.log").read_text()
    assert "Seed set to 1" in log and "an old call" in log and "second line" in log


def test_library_notices_of_graphs_resumes_and_sweeps_go_to_the_log_file(tmp_path, capfd):
    """What the console shows (nothing) of PyG's "Processing... Done!" (printed inside
    `fetching`, the first read of a dataset), Lightning's warnings on a resumed run's own
    checkpoints/ and on one batch per epoch (every graph run, `[rank0]` under DDP): the log
    file has them. A sweep's launch line shows the job's overrides without the environment
    override litlab adds to it."""
    import sys

    from lightning.pytorch.utilities.warnings import PossibleUserWarning

    from litlab.utils.files import fetching

    class Launcher:  # a launcher of this module: it logs through this module's logger
        pass

    root = logging.getLogger()
    handlers, shown, level = root.handlers[:], warnings.showwarning, root.level
    root.setLevel(logging.INFO)
    screen, file = logging.StreamHandler(), logging.FileHandler(tmp_path / "run.log")
    root.handlers = [screen, file]
    try:
        console.setup()
        with fetching(tmp_path / "Cora" / "raw"):
            print("Processing...", file=sys.stderr)
            print("Done!", file=sys.stderr)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = console._show_warning
            warnings.warn(  # Lightning's words (ModelCheckpoint, fit loop)
                f"Checkpoint directory {tmp_path} exists and is not empty.", stacklevel=1
            )
            warnings.warn(
                "The number of training batches (1) is smaller than the logging interval "
                "Trainer(log_every_n_steps=50). Set a lower value for log_every_n_steps if "
                "you want to see logs for the training epoch.",
                PossibleUserWarning,
                stacklevel=1,
            )
        console.launch_lines(Launcher())
        logging.getLogger(__name__).warning(  # WARNING: shown whatever the logger's level
            "\t#1 : seed=2 ++hydra.job.env_set.LITLAB_SWEEP_RESUME=1 model.optimizer.lr=0.1"
        )
    finally:
        root.handlers, warnings.showwarning = handlers, shown
        root.setLevel(level)
        file.close()
        logging.getLogger(__name__).filters.clear()
    out = capfd.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == ["warning: \t#1 : seed=2 model.optimizer.lr=0.1"], out.err
    log = (tmp_path / "run.log").read_text()
    for line in ("Processing...\nDone!", "exists and is not empty", "logging interval"):
        assert line in log


def test_compact_summary_keeps_modules_with_parameters():
    data = [
        (" ", ["0", "1", "2"]),
        ("Name", ["net", "train_metrics", "val_loss"]),
        ("Type", ["SmallCNN", "MetricCollection", "MeanMetric"]),
        ("Params", ["94.2 K", "0", "0"]),
        ("Mode", ["train", "train", "train"]),
        ("FLOPs", ["0", "0", "0"]),
    ]
    assert compact_columns(data) == [
        ("Name", ["net"]),
        ("Type", ["SmallCNN"]),
        ("Params", ["94.2 K"]),
    ]
    with_flops = [*data[:5], ("FLOPs", ["1.2 M", "0", "0"])]
    assert ("FLOPs", ["1.2 M"]) in compact_columns(with_flops)
    assert totals_line(94186, 94186, 0.377, 0) == "params: 94.2 K trainable, 0 frozen, 0.377 MB"


def test_tuners_save_and_restore_their_checkpoint_with_weights_only_set():
    """Lightning's finders call `trainer.save_checkpoint(path)` and
    `_checkpoint_connector.restore(path)`; inside the tuning step both get the flag."""
    from litlab.runs.tuning import _explicit_weights_only

    calls = []

    class Connector:
        def restore(self, checkpoint_path=None, weights_only=None):
            calls.append(("restore", weights_only))

    class Trainer:
        _checkpoint_connector = Connector()

        def save_checkpoint(self, filepath, weights_only=None, storage_options=None):
            calls.append(("save", weights_only))

    trainer = Trainer()
    with _explicit_weights_only(trainer):
        trainer.save_checkpoint("tmp.ckpt")
        trainer._checkpoint_connector.restore("tmp.ckpt")
        trainer.save_checkpoint("best.ckpt", True)  # a caller that sets it keeps its value
    trainer.save_checkpoint("after.ckpt")
    assert calls == [("save", False), ("restore", True), ("save", True), ("save", None)]


@pytest.mark.slow  # an LR search, a quantization, an eval and an export: ~2 min of CPU
@pytest.mark.xdist_group("digits_run")
def test_tune_compress_eval_export_print_their_run_dir_no_notice_no_line_twice(
    digits_run, tmp_path
):
    logs = tmp_path / "logs"
    tune = run_cli(
        "train.py",
        "tune=lr",
        "tune.lr_find.num_training=20",
        "trainer.max_epochs=1",
        log_dir=logs,
        quiet=False,
    )
    quantize = run_cli(
        "compress.py", f"ckpt_path={digits_run.best}", "compress=quantize", log_dir=logs
    )
    evaluate = run_cli("eval.py", f"ckpt_path={digits_run.best}", log_dir=logs)
    export = run_cli("export.py", f"ckpt_path={digits_run.best}", "formats=[onnx]", log_dir=logs)
    compress_dir = run_dirs(logs, "compress")[-1]
    assert f"run dir     {compress_dir}" in quantize.stdout
    assert f"run dir     {run_dirs(logs, 'eval')[-1]}" in evaluate.stdout
    assert f"run dir {run_dirs(logs, 'export')[-1]}" in export.stdout
    for proc, log in (
        (tune, run_dirs(logs)[-1] / "train.log"),
        (quantize, compress_dir / "compress.log"),
        (evaluate, run_dirs(logs, "eval")[-1] / "eval.log"),
        (export, run_dirs(logs, "export")[-1] / "export.log"),
    ):
        out = proc.stdout + proc.stderr
        assert not [n for n in NOISE if n in out], out
        assert not repeated(non_empty(out)), repeated(non_empty(out))
        assert "weights_only` was not set" not in log.read_text()
    assert "LR finder: suggested lr" in tune.stdout


def test_python_api_prints_the_header_not_the_tree(tmp_path, capfd):
    """`litlab.train([...])` (a notebook's call) prints the short header and the summary; the
    whole config tree goes to config_tree.txt."""
    from litlab import train

    result = train(
        [
            f"paths.log_dir={tmp_path}",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1",
            "trainer.num_sanity_val_steps=0",
            "test=false",
            "callbacks.rich_progress_bar=null",
        ]
    )
    out = capfd.readouterr()
    lines = non_empty(out.out + out.err)
    assert lines[0] == "train: data=digits model=cnn trainer=default logger=csv", lines
    assert "CONFIG" not in out.out and not [n for n in LIBRARY_LINES if n in out.out + out.err]
    assert len(lines) <= 20, "\n".join(lines)
    tree = (result.run_dir / "config_tree.txt").read_text().splitlines()
    assert tree[0] == "CONFIG" and len(tree) > 100
