"""`data_split.json`: which items of the data each split of a run holds, named by their
sources (a CSV row or id, an image file, a volume, a node or graph index, a dataset index), so
every prediction and every metric can be traced back to what it was computed on."""

from pathlib import Path

from lightning.pytorch.callbacks import Callback

from litlab.data.splits import write_split

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
