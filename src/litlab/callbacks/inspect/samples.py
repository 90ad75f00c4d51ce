"""What the predictions look like on the test set: the kind's samples figure
(`Kind.samples_figure`, litlab.tasks.figures and the kinds' own: an image grid, volume
slices, per-class node accuracy, a residual plot, mask overlays), written as
inspect/samples.png with any tables it keeps beside it."""

import csv

from litlab.callbacks.inspect.base import TaskCallback, save_figure


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
