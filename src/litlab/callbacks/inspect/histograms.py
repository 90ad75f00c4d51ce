"""Whether the weights move and the gradients flow: per-parameter weight and gradient
histograms every N epochs (TensorBoard), a one-line warning when a layer's gradient norm is
over `ratio` times below or above the median layer's, and the model graph once."""

import copy
import logging
import warnings

import torch

from litlab.bounds import PosFloat, PosInt
from litlab.callbacks.inspect.base import TaskCallback, flush, tensorboards
from litlab.errors import one_line

log = logging.getLogger(__name__)


def outliers(norms: dict[str, float], ratio: float) -> tuple[list[str], list[str], float]:
    """(vanishing, exploding) layer names against the median norm, and the median."""
    median = float(torch.tensor(list(norms.values())).median())
    low = [k for k, v in norms.items() if v * ratio < median]
    high = [k for k, v in norms.items() if v > median * ratio]
    return low, high, median


class WeightGradHistograms(TaskCallback):
    """Gradients are taken at the first optimizer step of every `every_n_epochs`-th epoch
    (after accumulation, before clipping); weights at the end of that epoch."""

    inspects = "histograms"

    def __init__(
        self, every_n_epochs: PosInt = 5, ratio: PosFloat = 1000.0, bins: PosInt = 64, **kwargs
    ):
        super().__init__(**kwargs)
        self.every_n_epochs, self.ratio, self.bins = every_n_epochs, ratio, bins
        self._pending = False

    def _due(self, trainer) -> bool:
        return trainer.current_epoch % self.every_n_epochs == 0

    def on_train_epoch_start(self, trainer, pl_module):
        self._pending = self._due(trainer)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if not self._pending:
            return
        self._pending = False
        grads = {n: p.grad for n, p in pl_module.named_parameters() if p.grad is not None}
        norms = {n: float(g.detach().float().norm()) for n, g in grads.items()}
        if len(norms) > 2:
            low, high, median = outliers(norms, self.ratio)
            if (low or high) and trainer.is_global_zero:
                log.warning(
                    "gradient norms (epoch %d, median %.3g): %s",
                    trainer.current_epoch,
                    median,
                    "; ".join(
                        [
                            f"vanishing in {', '.join(low)}" if low else "",
                            f"exploding in {', '.join(high)}" if high else "",
                        ]
                    ).strip("; "),
                )
        if trainer.is_global_zero:
            for writer in tensorboards(trainer):
                for name, g in grads.items():
                    writer.add_histogram(
                        f"grads/{name}", g.detach().float().cpu(), trainer.global_step, self.bins
                    )
            flush(tensorboards(trainer))

    def on_train_epoch_end(self, trainer, pl_module):
        if not self._due(trainer) or not trainer.is_global_zero:
            return
        for writer in tensorboards(trainer):
            for name, p in pl_module.named_parameters():
                writer.add_histogram(
                    f"weights/{name}", p.detach().float().cpu(), trainer.global_step, self.bins
                )
        flush(tensorboards(trainer))


class ModelGraph(TaskCallback):
    """The net's graph in TensorBoard's Graphs tab, traced once on one training sample (on a
    copy in eval mode: batch-norm statistics of the real net are not touched)."""

    inspects = "model_graph"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.done = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.done or not trainer.is_global_zero:
            return
        self.done = True
        writers = tensorboards(trainer)
        net = copy.deepcopy(pl_module.net).eval()
        example = self.kind(trainer).net_input(batch)
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace's deprecation
                for writer in writers:
                    writer.add_graph(net, example[:1].detach())
            flush(writers)
        except Exception as err:  # noqa: BLE001 (a net that cannot be traced: say so, go on)
            log.warning("model graph not written (tracing failed: %s)", one_line(err))
