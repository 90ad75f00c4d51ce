"""What a run tells its user: the config at start, hyperparameters to the loggers, and a
summary at the end (metrics and where the checkpoint, logs and config are); and what it records
of its data: its predictions and data_split.json.

Per-sample predictions (what `predict_step` returns) gathered into one CSV, each row named
by its source (the datamodule's `sources`: a CSV row, a file, a volume and slice, a node).

`data_split.json`: which items of the data each split of a run holds, named by their
sources (a CSV row or id, an image file, a volume, a node or graph index, a dataset index), so
every prediction and every metric can be traced back to what it was computed on."""

import io
import json
import logging
import os
import warnings
from pathlib import Path

import rich
import rich.console
import rich.syntax
import rich.tree
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from litlab import environment
from litlab.checkpointing import run_config as provenance
from litlab.checkpointing.resume_state import ResumeState
from litlab.data import write_split
from litlab.loggers import stored_id
from litlab.utils.distributed import is_rank_zero

log = logging.getLogger(__name__)
FIRST_KEYS = ("data", "model", "callbacks", "logger", "trainer", "paths", "extras")
HEADER_GROUPS = (
    *("data", "model", "compress", "trainer", "logger"),
    *("experiment", "debug", "hparams_search"),
)
CONFIG_TREE = "config_tree.txt"


def apply_extras(cfg: DictConfig) -> None:
    """What every run does as it starts (train, eval, compress and federate call this once the
    config is checked and the imports are done): warnings set-up, the imports' objects frozen
    (`environment.freeze_imports`), a short header, and the config tree: saved to <run
    dir>/config_tree.txt, printed too with extras.print_config=true (rank 0 only). The
    console's set-up (what goes to the log file only) is `litlab.console`'s, made before the
    task starts."""
    if cfg.get("model") is None:  # eval.py: rebuilt from a checkpoint, training callbacks left out
        warnings.filterwarnings("ignore", message="Be aware that when using `ckpt_path`")
    environment.freeze_imports()  # the run starts: what its imports made lives on
    extras = cfg.get("extras") or {}
    if extras.get("ignore_warnings"):
        warnings.filterwarnings("ignore")
    if not is_rank_zero():
        return
    out = Path(cfg.paths.output_dir) if cfg.get("paths") else None
    tree = config_tree(cfg)
    if out is not None and out.is_dir():
        # force_jupyter=False: in a notebook rich would display the tree instead of writing it
        console = rich.console.Console(
            file=io.StringIO(), width=100, color_system=None, force_jupyter=False
        )
        console.print(tree)
        text = "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())
        (out / CONFIG_TREE).write_text(text + "\n")
    if extras.get("print_config"):
        rich.print(tree)
    print(header(cfg, out), flush=True)


def header(cfg: DictConfig, out: Path | None) -> str:
    """What this run is, in a few lines: the chosen options, threads, where its files go."""
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    shown = [f"{g}={choices[g]}" for g in HEADER_GROUPS if choices.get(g) not in (None, "null")]
    lines = [f"{cfg.get('task_name', 'run')}: {' '.join(shown)}".rstrip()]
    if cfg.get("ckpt_path"):
        lines.append(f"  checkpoint  {cfg.ckpt_path}")
    if cfg.get("model_path"):  # eval.py of an exported file
        lines.append(f"  model       {cfg.model_path}")
    table = OmegaConf.select(cfg, "data.path", default=None) if cfg.get("data") else None
    if isinstance(table, str):  # a file of the user's (a table): which one, not the recipe's
        lines.append(f"  data        {table}")
    changed = cfg.get("data_overrides")
    if changed:  # eval, export, compress: the checkpoint's data with these keys changed
        keys = " ".join(f"{k}={v}" for k, v in changed.items())
        lines.append(f"  data        the checkpoint's, with {keys} (data_overrides)")
    lines.append(
        f"  threads     {os.environ.get('OMP_NUM_THREADS', 'torch default')} "
        f"(threads={cfg.get('threads', 'auto')})"
    )
    if out is not None:
        lines.append(
            f"  run dir     {out}  (config tree: {CONFIG_TREE}; extras.print_config=true prints it)"
        )
    return "\n".join(lines)


def config_tree(cfg: DictConfig):
    """The composed config as a rich tree, main groups first (not resolved: as composed)."""
    tree = rich.tree.Tree("CONFIG", style="dim", guide_style="dim")
    keys = [k for k in FIRST_KEYS if k in cfg] + [k for k in cfg if k not in FIRST_KEYS]
    for key in keys:
        node = cfg[key]
        text = OmegaConf.to_yaml(node, resolve=False) if isinstance(node, DictConfig) else str(node)
        tree.add(key, style="dim").add(rich.syntax.Syntax(text, "yaml"))
    return tree


def log_hyperparameters(cfg: DictConfig, model, trainer) -> None:
    """Send the whole resolved config and parameter counts to every logger."""
    if not trainer.loggers:
        return
    hparams = OmegaConf.to_container(cfg, resolve=True)
    hparams.pop("hydra", None)
    params = list(model.parameters())
    hparams["model/params/total"] = sum(p.numel() for p in params)
    hparams["model/params/trainable"] = sum(p.numel() for p in params if p.requires_grad)
    for logger in trainer.loggers:
        logger.log_hyperparams(hparams)


def best_checkpoint(trainer) -> str | None:
    """Path of the best checkpoint (else last), or None when none was written. Any checkpoint
    callback that selects (ModelCheckpoint with a monitor, JointModelCheckpoint) wins over
    `last.ckpt`, whatever their order in the config."""
    callbacks = trainer.checkpoint_callbacks
    best = [cb.best_model_path for cb in callbacks if cb.best_model_path]
    last = [cb.last_model_path for cb in callbacks if cb.last_model_path]
    return (best or last or [None])[0]


def resumed_metrics(trainer) -> dict[str, float]:
    """The metrics stored in the checkpoint the fit resumed from (checkpointing.resume_state)."""
    states = [c for c in trainer.callbacks if isinstance(c, ResumeState)]
    return dict(states[0].resumed_metrics) if states else {}


def save_metrics(cfg: DictConfig, metrics: dict[str, float]) -> None:
    """<output_dir>/metrics.json: the final metrics, read back by sweep summaries."""
    if is_rank_zero():
        (Path(cfg.paths.output_dir) / "metrics.json").write_text(json.dumps(metrics, indent=2))


def summary(
    cfg: DictConfig, metrics: dict[str, float], checkpoint: str | None, label: str = "checkpoint"
) -> None:
    """Final lines of a run: metrics, then where everything is (`label`: what `checkpoint`
    is, e.g. the model file eval.py scored)."""
    if not is_rank_zero():
        return
    out = Path(cfg.paths.output_dir)
    lines = ["", "Results", *results_lines(metrics)]
    lines += [
        "Files",
        f"  run dir          {out}",
        f"  {label:<16} {checkpoint or '(none written)'}",
        f"  logs             {out / (cfg.task_name + '.log')}",
    ]
    lines += [
        f"  {name:<16} {out / name}"
        for name in ("csv", "tensorboard", "wandb", "inspect")
        if (out / name).exists()
    ]
    lines += [f"  profiler         {p}" for p in sorted((out / "profiler").glob("*.txt"))]
    mlflow = OmegaConf.select(cfg, "logger.mlflow")
    local = not (mlflow and mlflow.get("tracking_uri")) and not os.environ.get(
        "MLFLOW_TRACKING_URI"
    )
    if mlflow is not None and local and mlflow.get("db"):
        lines.append(
            f"  mlflow ui        --backend-store-uri sqlite:///{Path(mlflow.db).resolve()}"
        )
        lines += _mlflow_run_page(out)
    if (out / ".hydra" / "config.yaml").exists():
        lines.append(f"  config           {out / '.hydra' / 'config.yaml'}")
    print("\n".join(lines), flush=True)


def _mlflow_run_page(out: Path) -> list[str]:
    """The run's page in that UI: it opens on MLflow 3's GenAI home (no traces there), and
    `#/runs/<id>` (a route of the installed UI) goes straight to the run."""
    run_id = stored_id(out, "mlflow")
    return [f"  mlflow run       http://127.0.0.1:5000/#/runs/{run_id}"] if run_id else []


def results_lines(metrics: dict[str, float]) -> list[str]:
    """One line per split (`test  acc 0.9917  f1 0.9916  loss 0.0186`), splits in the order
    test, val, train, then others; metrics without a split prefix are left out."""
    by_split: dict[str, list[str]] = {}
    for key, value in sorted(metrics.items()):
        if "/" in key:
            split, name = key.split("/", 1)
            by_split.setdefault(split, []).append(f"{name} {value:.4f}")
    order = {"test": 0, "val": 1, "train": 2}
    splits = sorted(by_split, key=lambda s: (order.get(s, 3), s))
    return [f"  {split:<6} " + "  ".join(by_split[split]) for split in splits]


def record_provenance(cfg: DictConfig, datamodule, typed: dict | None = None) -> dict:
    """Write provenance.json into the run dir (rank 0) and return what checkpoints carry: the
    code and package versions (the data checksums and `typed`, the data paths as typed before
    they were made absolute, stay in the file)."""
    record = provenance.collect(datamodule if is_rank_zero() else None)
    if typed:
        record[provenance.TYPED] = typed
    if is_rank_zero() and cfg.get("paths"):
        subdir = HydraConfig.get().output_subdir if HydraConfig.initialized() else None
        provenance.write_provenance(cfg.paths.output_dir, record, subdir)
    return {k: record[k] for k in ("code", "packages")}


# ----------------------------------------------------------- predictions
def write_csv(batches: list, path: Path, sources: dict[str, list] | None = None) -> int:
    """Concatenate predict_step's dicts of per-sample tensors (or lists of strings), put the
    source columns after `index` (the row's position in the split), and write them; returns
    rows. A source column the batches already hold (3D segmentation's `case`, read from the
    batch; a node's index) is theirs."""
    import pandas as pd
    import torch

    batches = [b for b in batches if b]
    if not batches:
        return 0

    def column(values: list):  # tensors, or lists of names (e.g. a volume's case id)
        if isinstance(values[0], torch.Tensor):
            return torch.cat([v.detach().cpu().reshape(-1) for v in values]).numpy()
        return [item for v in values for item in v]

    columns = {k: column([b[k] for b in batches]) for k in batches[0]}
    frame = pd.DataFrame(columns)
    extra = {k: v for k, v in (sources or {}).items() if k not in frame}
    for name, values in extra.items():
        if len(values) != len(frame):  # the datamodule and predict_step disagree: a bug
            raise ValueError(f"{len(values)} sources ({name}) for {len(frame)} predicted rows")
    frame = pd.concat([pd.DataFrame(extra), frame], axis=1)
    frame.insert(0, "index", range(len(frame)))
    tmp = path.with_suffix(".csv.tmp")
    frame.to_csv(tmp, index=False, float_format="%.6g")
    tmp.replace(path)  # never a half-written predictions.csv
    return len(frame)


# ------------------------------------------------------------ split file
NAME = "data_split.json"


class SplitFile(Callback):
    """Writes the datamodule's `split_sources` once its splits are set up (rank 0; never over an
    existing file: a resumed run's split is the one it started with, and 3D segmentation's
    `data.split_file` may have written it already)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def setup(self, trainer, pl_module, stage: str) -> None:
        sources = getattr(trainer.datamodule, "split_sources", None)
        if sources and trainer.is_global_zero and not self.path.exists():
            write_split(self.path, sources)
