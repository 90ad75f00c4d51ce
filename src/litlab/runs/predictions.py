"""Per-sample predictions (what `predict_step` returns) gathered into one CSV, each row named
by its source (the datamodule's `sources`: a CSV row, a file, a volume and slice, a node).

`data_split.json`: which items of the data each split of a run holds, named by their
sources (a CSV row or id, an image file, a volume, a node or graph index, a dataset index), so
every prediction and every metric can be traced back to what it was computed on."""

from pathlib import Path

from lightning.pytorch.callbacks import Callback

from litlab.data import write_split


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
