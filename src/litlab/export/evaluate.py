"""eval.py's recipe (`python src/eval.py`, `litlab.evaluate`): a checkpoint (`ckpt_path`) is
tested on the split it was trained with (rebuilt from the config stored inside it), writing
metrics.json and predictions.csv. An exported ONNX file (`model_path=FILE`, fp32 or int8) is
scored as its checkpoint is: the run is rebuilt from the config its metadata stores (checked as
a checkpoint's is: `checkpointing.exported`), the net's forward is the file under ONNX Runtime,
and the checkpoint's own test and predict steps run (`score`): the same metric names and
torchmetrics, the same predictions.csv. An fp32 file's figures equal its checkpoint's within
float tolerance; an int8 file's are its own. The checkpoint may be gone."""

import contextlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.errors import UserError, one_line
from litlab.runs.run_end import RunResult

#: the numpy type of each ONNX input type a net takes (others are fed as they come)
TYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(int64)": "int64"}


def evaluate_entry(cfg: DictConfig) -> RunResult:
    """src/eval.py and `litlab.evaluate`: a checkpoint (`ckpt_path`, `evaluate_checkpoint`) or
    an exported file (`model_path`)."""
    if cfg.get("model_path") is None:
        return evaluate_checkpoint(cfg)
    return evaluate_file(cfg)


def evaluate_file(cfg: DictConfig) -> RunResult:
    """Metrics and predictions of `cfg.model_path` on `cfg.split` of the run it names."""
    from litlab.config import validate

    # bad input (no run named, crafted metadata, both files given) fails here, in one line
    settings = validate.check(cfg, "eval")
    from litlab.checkpointing import exported
    from litlab.checkpointing.trust import ExportedFile
    from litlab.runs import summary as report
    from litlab.runs.rebuild import rebuild

    path = settings.model_path
    stored = exported.stored_run(path)
    forward = OnnxForward(path)
    report.apply_extras(cfg)
    run = rebuild(
        stored.config,
        ExportedFile(path),
        OmegaConf.to_container(cfg.data_overrides, resolve=True),
        trust=settings.trust_checkpoint,
        data_dir=cfg.paths.data_dir,
        written_by=(stored.checkpoint, stored.config.get("ckpt_path")),
    )
    _check_fits(run, forward, path)
    run.model.forward_through(forward)
    return score(cfg, run, str(path), label="model")


def _check_fits(run, forward: "OnnxForward", path) -> None:
    """The file is the run's net: the inputs its task kind feeds, and on the export example
    the output shape of the net its stored config builds (one line now, not a traceback from
    inside the test loop)."""
    import torch

    from litlab import tasks
    from litlab.export.recipe import prepare_net

    kind = tasks.of(run.datamodule)
    spec = kind.export_spec(run)
    if spec.input_names != forward.names:
        raise UserError(
            f"model_path={path} takes inputs {forward.names}; its run's task kind "
            f"({spec.kind}) feeds {spec.input_names}: not a file src/export.py wrote for it"
        )
    with torch.inference_mode():
        want = tuple(prepare_net(run.model, kind)(*spec.example).shape)
        got = tuple(forward(*spec.example).shape)
    if got != want:
        raise UserError(
            f"model_path={path} answers outputs of shape {list(got)} where the net its "
            f"metadata's run config builds answers {list(want)}: the file is not that run's "
            "net; re-export the checkpoint with src/export.py"
        )


class OnnxForward:
    """The file under ONNX Runtime, called as the net is called: tensors in (cast to the
    file's input types), one tensor out (the first output) on the inputs' device."""

    def __init__(self, path):
        from litlab.threads import ort_session

        self.path = path
        try:
            self.session = ort_session(Path(path))  # threads: torch's, as eval.py's threads= set
        except Exception as err:  # noqa: BLE001 (ORT raises its own types on a bad graph)
            raise UserError(
                f"model_path={path} cannot be loaded by ONNX Runtime: {one_line(err, limit=200)}"
            ) from None
        self.names = [i.name for i in self.session.get_inputs()]
        self.types = [TYPES.get(i.type) for i in self.session.get_inputs()]

    def __call__(self, *inputs):
        import torch

        if len(inputs) != len(self.names):
            raise UserError(
                f"model_path={self.path} takes {len(self.names)} inputs {self.names}; the "
                f"run's module gives {len(inputs)}"
            )
        feeds = {}
        for name, kind, tensor in zip(self.names, self.types, inputs):
            array = tensor.detach().cpu().numpy()
            feeds[name] = array.astype(kind, copy=False) if kind else array
        try:
            out = self.session.run(None, feeds)[0]
        except Exception as err:  # noqa: BLE001 (ORT's errors: shapes, types)
            shapes = " and ".join(str(list(t.shape)) for t in inputs)
            raise UserError(
                f"model_path={self.path} cannot run on the run's data (input of shape "
                f"{shapes}): {one_line(err, limit=300)}"
            ) from None
        return torch.from_numpy(out).to(inputs[0].device)


# -------------------------------------------------------------- evaluate
def evaluate_checkpoint(cfg: DictConfig) -> RunResult:
    """Metrics of `cfg.ckpt_path` on `cfg.split`; the checkpoint is read once (load_run)."""
    from litlab.config import validate

    # bad input fails here, in one line, before any data is read
    settings = validate.check(cfg, "eval")
    if settings.model_path is not None:
        raise UserError(
            f"model_path={settings.model_path}: an exported file is scored by src/eval.py or "
            "litlab.evaluate (litlab.export.evaluate), not by this checkpoint recipe"
        )
    from litlab.runs import run_end
    from litlab.runs import summary as report
    from litlab.runs.rebuild import load_run

    report.apply_extras(cfg)
    overrides = OmegaConf.to_container(cfg.data_overrides, resolve=True)
    trust = bool(cfg.get("trust_checkpoint"))
    run = load_run(cfg.ckpt_path, overrides, trust=trust, data_dir=cfg.paths.data_dir)
    from litlab.checkpointing import run_config as provenance

    note = provenance.code_note(run.checkpoint.get(provenance.KEY))
    if note:  # the checkpoint was trained by other code (a later commit, local edits)
        print(note, flush=True)
    watch = run_end.watched(run.model.net, run.config.model.net._target_)
    return score(cfg, run, str(cfg.ckpt_path), watch)


def score(cfg: DictConfig, run, source: str, watch=None, label: str = "checkpoint") -> RunResult:
    """Test `run` (a `LoadedRun`) on `cfg.split` with the module's own steps and metrics and
    write metrics.json and predictions.csv into the run dir. `source`: what was scored (a
    checkpoint, a model file: `label` says which); `watch`: a context around the test."""
    from litlab.config import build
    from litlab.runs import summary as report

    trainer = build.trainer(cfg)  # eval.yaml has no callbacks or logger groups: none of either
    evaluate_split = trainer.test if cfg.split == "test" else trainer.validate
    # verbose=False: the Results block of report.summary says the same, once
    with watch or contextlib.nullcontext():
        metrics = evaluate_split(run.model, datamodule=run.datamodule, verbose=False)[0]
    out = Path(cfg.paths.output_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if cfg.predictions:
        run.datamodule.predict_split = cfg.split
        run.model.output_dir = out  # segmentation's predicted masks: masks/ beside the rows
        batches = trainer.predict(run.model, datamodule=run.datamodule)
        # each row named by its source (a CSV row, a file, a volume and slice, a node)
        sources = run.datamodule.sources(cfg.split)
        rows = report.write_csv(batches, out / "predictions.csv", sources)
        print(f"wrote {rows} predictions to {out / 'predictions.csv'}")
    report.summary(cfg, metrics, source, label)
    return RunResult(metrics, out, source if label == "checkpoint" else None)
