"""What a recipe returns: enough for a notebook or a sweep to go on without parsing logs."""

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RunResult:
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. {"test/acc": 0.99, ...}
    run_dir: Path | None = None  # logs/<task_name>/runs/<timestamp>/ (what the CLI writes)
    best_checkpoint: str | None = None  # best by the model's monitor, else last; None if none
