"""What the inspection callbacks share: the task kinds they apply to, where their files go, how a picture
reaches every active logger.

What the predictions look like on the test set: the kind's samples figure
(`Kind.samples_figure`, litlab.tasks.figures and the kinds' own: an image grid, volume
slices, per-class node accuracy, a residual plot, mask overlays), written as
inspect/samples.png with any tables it keeps beside it."""

import csv
import logging
from pathlib import Path
from typing import Literal

from lightning.pytorch.callbacks import Callback

from litlab import tasks
from litlab.tasks.kind import Kind

log = logging.getLogger(__name__)


class TaskCallback(Callback):
    """A callback that only makes sense for some task kinds: those whose adapter lists its
    `inspects` name (`litlab.tasks`, `Kind.inspect`).

    `unfit`: what to do when the run's task kind does not list it. `refuse` (a callback chosen
    on its own): the run stops at build time in one line. `skip` (`callbacks=inspect`, which
    turns everything on): it is left out with one log line."""

    #: the name task kinds list when this callback applies to them
    inspects: str = ""

    def __init__(self, unfit: Literal["refuse", "skip"] = "refuse"):
        self.unfit = unfit

    @staticmethod
    def out_dir(trainer) -> Path:
        """<run dir>/inspect: PNG and CSV files of every inspection callback."""
        path = Path(trainer.default_root_dir) / "inspect"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @staticmethod
    def kind(trainer) -> Kind:
        return tasks.of(trainer.datamodule)


def save_figure(trainer, fig, name: str, step: int | None = None, tight: bool = True) -> Path:
    """Write `fig` as <run dir>/inspect/<name>.png and send it to every active logger.
    `tight=False` for figures laid out by hand: the tight box costs a second drawing."""
    path = TaskCallback.out_dir(trainer) / f"{name}.png"
    fig.savefig(path, dpi=90, bbox_inches="tight" if tight else None)
    publish_image(trainer, path, name, trainer.global_step if step is None else step)
    return path


def publish_image(trainer, path: Path, name: str, step: int) -> None:
    """TensorBoard gets the pixels, W&B the image, MLflow the file (as an artifact)."""
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger

    for logger in trainer.loggers:
        try:
            if isinstance(logger, TensorBoardLogger):
                from matplotlib.image import imread

                pixels = imread(path)[..., :3]
                logger.experiment.add_image(f"inspect/{name}", pixels, step, dataformats="HWC")
            elif isinstance(logger, WandbLogger):
                logger.log_image(key=f"inspect/{name}", images=[str(path)], step=step)
            elif isinstance(logger, MLFlowLogger):
                logger.experiment.log_artifact(logger.run_id, str(path), "plots")
        except Exception as err:  # noqa: BLE001 (a logger failing must not end the run)
            log.warning("could not send %s to %s: %s", name, type(logger).__name__, err)


_OWN_WRITERS: dict[str, object] = {}


def tensorboards(trainer) -> list:
    """SummaryWriters of the TensorBoard loggers; without one, a writer of our own in
    <run dir>/tensorboard (histograms, graph and projector need TensorBoard's format)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    writers = [lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
    if writers:
        return writers
    path = str(Path(trainer.default_root_dir) / "tensorboard")
    if path not in _OWN_WRITERS:
        from torch.utils.tensorboard import SummaryWriter

        _OWN_WRITERS[path] = SummaryWriter(path)
    return [_OWN_WRITERS[path]]


def flush(writers) -> None:
    for writer in writers:
        writer.flush()


# --------------------------------------------------------------- samples
class SamplePredictions(TaskCallback):
    inspects = "samples"

    def __init__(self, num_samples: int = 16, **kwargs):
        super().__init__(**kwargs)
        self.num_samples = num_samples
        self._figure = None

    def on_test_epoch_start(self, trainer, pl_module):
        self._figure = self.kind(trainer).samples_figure(self.num_samples)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if self._figure is not None:
            self._figure.collect(pl_module, batch)

    def on_test_epoch_end(self, trainer, pl_module):
        figure, self._figure = self._figure, None
        if figure is None or not figure.held or not trainer.is_global_zero:
            return
        for name, rows in getattr(figure, "tables", lambda _: {})(trainer).items():
            with open(self.out_dir(trainer) / name, "w", newline="") as f:
                csv.writer(f).writerows(rows)
        save_figure(trainer, figure.draw(trainer), "samples", tight=getattr(figure, "tight", True))
