"""What a run tells its user: the config at start, hyperparameters to the loggers, and a
summary at the end (metrics and where the checkpoint, logs and config are)."""
import logging
import warnings
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from litlab.cli import is_rank_zero

log = logging.getLogger(__name__)
FIRST_KEYS = ("data", "model", "callbacks", "logger", "trainer", "paths", "extras")


def apply_extras(cfg: DictConfig) -> None:
    """Logging and warnings set-up, and the config tree, from `extras` (rank 0 prints)."""
    lightning_console = logging.getLogger("lightning")
    if logging.getLogger().handlers:  # Hydra's handlers print it already: no second copy
        lightning_console.handlers = []
    # Lightning 2.6 on torch 2.14 warns about its own use of a torch API, once per run
    warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)")
    extras = cfg.get("extras") or {}
    if extras.get("ignore_warnings"):
        warnings.filterwarnings("ignore")
    if extras.get("print_config") and is_rank_zero():
        print_config_tree(cfg)


def print_config_tree(cfg: DictConfig, save_to: Path | None = None) -> None:
    import rich
    import rich.syntax
    import rich.tree

    tree = rich.tree.Tree("CONFIG", style="dim", guide_style="dim")
    keys = [k for k in FIRST_KEYS if k in cfg] + [k for k in cfg if k not in FIRST_KEYS]
    for key in keys:
        node = cfg[key]
        text = OmegaConf.to_yaml(node, resolve=False) if isinstance(node, DictConfig) else str(node)
        tree.add(key, style="dim").add(rich.syntax.Syntax(text, "yaml"))
    rich.print(tree)


def log_hyperparameters(cfg: DictConfig, model, trainer) -> None:
    """Send the whole resolved config and parameter counts to every logger."""
    if not trainer.loggers:
        return
    hparams = OmegaConf.to_container(cfg, resolve=True)
    hparams.pop("hydra", None)
    hparams["model/params/total"] = sum(p.numel() for p in model.parameters())
    hparams["model/params/trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    for logger in trainer.loggers:
        logger.log_hyperparams(hparams)


def best_checkpoint(trainer) -> str | None:
    """Path of the best checkpoint (else last), or None when none was written."""
    cb = trainer.checkpoint_callback
    if cb is None:
        return None
    return cb.best_model_path or cb.last_model_path or None


def save_metrics(cfg: DictConfig, metrics: dict[str, float]) -> None:
    """<output_dir>/metrics.json: the final metrics, read back by sweep summaries."""
    import json

    if is_rank_zero():
        (Path(cfg.paths.output_dir) / "metrics.json").write_text(json.dumps(metrics, indent=2))


def summary(cfg: DictConfig, metrics: dict[str, float], checkpoint: str | None) -> None:
    """Final lines of a run: metrics, then where everything is."""
    if not is_rank_zero():
        return
    out = Path(cfg.paths.output_dir)
    lines = ["", "Results"]
    lines += [f"  {k:<16} {v:.4f}" for k, v in sorted(metrics.items()) if "/" in k]
    lines += ["Files",
              f"  run dir          {out}",
              f"  checkpoint       {checkpoint or '(none written)'}",
              f"  logs             {out / (cfg.task_name + '.log')}"]
    lines += [f"  {name:<16} {out / name}" for name in ("csv", "tensorboard", "wandb", "inspect")
              if (out / name).exists()]
    lines += [f"  profiler         {p}" for p in sorted((out / "profiler").glob("*.txt"))]
    if (out / ".hydra" / "config.yaml").exists():
        lines.append(f"  config           {out / '.hydra' / 'config.yaml'}")
    print("\n".join(lines), flush=True)
