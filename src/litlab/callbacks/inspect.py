"""Callbacks that show what a run learned: confusion matrices, sample predictions, Grad-CAM,
t-SNE of the embeddings, weight/gradient histograms and the model graph. What each writes, and
for which tasks, is in docs/inspect.md.

Each declares its name (`inspects`); a task kind lists the ones that apply to it
(`litlab.tasks`), and `litlab.config.build` refuses the others. Their files go into
<run dir>/inspect/, and each picture to every active logger (`save_figure`); histograms, the
graph and the projector need TensorBoard's format (`tensorboards`)."""

import copy
import csv
import logging
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Literal

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger
from torch import nn
from torchmetrics.classification import MulticlassConfusionMatrix

from litlab import tasks
from litlab.bounds import Ge, PosFloat, PosInt
from litlab.errors import one_line
from litlab.tasks.figures import figure, mosaic
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


def save_figure(trainer, fig, name: str, tight: bool = True) -> Path:
    """Write `fig` as <run dir>/inspect/<name>.png and send it to every active logger:
    TensorBoard gets the pixels, W&B the image, MLflow the file (as an artifact).
    `tight=False` for figures laid out by hand: the tight box costs a second drawing."""
    path = TaskCallback.out_dir(trainer) / f"{name}.png"
    fig.savefig(path, dpi=90, bbox_inches="tight" if tight else None)
    step = trainer.global_step
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
    return path


_OWN_WRITERS: dict[str, object] = {}


def tensorboards(trainer) -> list:
    """SummaryWriters of the TensorBoard loggers; without one, a writer of our own in
    <run dir>/tensorboard (histograms, graph and projector need TensorBoard's format)."""
    writers = [lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
    if writers:
        return writers
    path = str(Path(trainer.default_root_dir) / "tensorboard")
    if path not in _OWN_WRITERS:
        from torch.utils.tensorboard import SummaryWriter

        _OWN_WRITERS[path] = SummaryWriter(path)
    return [_OWN_WRITERS[path]]


def _write_rows(path: Path, rows) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


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
            _write_rows(self.out_dir(trainer) / name, rows)
        save_figure(trainer, figure.draw(trainer), "samples", tight=getattr(figure, "tight", True))


# ------------------------------------------------------------- confusion
class ConfusionMatrix(TaskCallback):
    """Counts are torchmetrics' (synced across DDP ranks), so the test matrix sums to the test
    set and its diagonal over the total equals `test/acc`. Rows are true classes."""

    inspects = "confusion"

    def __init__(self, num_classes: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes  # null: the datamodule's dims
        self.matrix: MulticlassConfusionMatrix | None = None

    def _reset(self, trainer, pl_module) -> None:
        n = self.num_classes or trainer.datamodule.dims["num_classes"]
        self.matrix = MulticlassConfusionMatrix(n, validate_args=False).to(pl_module.device)
        self._logits = None
        batched = self.kind(trainer).batched_tensor
        if batched and getattr(self, "_hook", None) is None:
            # the step's own forward (one per batch) is captured: no second forward pass
            self._hook = pl_module.register_forward_hook(self._capture)

    def _capture(self, module, args, output) -> None:
        if self._logits is None:  # the step's forward; not other callbacks' later ones
            self._logits = output

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._logits = None

    on_test_batch_start = on_validation_batch_start

    def _update(self, pl_module, batch, split: str) -> None:
        if getattr(self, "_hook", None) is not None and self._logits is not None:
            logits, target = self._logits, batch[1]
        else:
            logits, target = pl_module.scores(batch, split)
        self.matrix.update(logits.argmax(1), target)

    def _unhook(self) -> None:
        if getattr(self, "_hook", None) is not None:
            self._hook.remove()
            self._hook = None

    def on_validation_epoch_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._reset(trainer, pl_module)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ):
        if not trainer.sanity_checking:
            self._update(pl_module, batch, "val")

    def on_validation_epoch_end(self, trainer, pl_module):
        self._unhook()
        if trainer.state.fn == "validate" and self.matrix is not None:  # trainer.validate
            self.write(trainer, "val")

    def on_fit_end(self, trainer, pl_module):
        if self.matrix is not None and self.matrix.update_called:  # the last val epoch
            self.write(trainer, "val")

    def on_test_epoch_start(self, trainer, pl_module):
        self._reset(trainer, pl_module)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._update(pl_module, batch, "test")

    def on_test_epoch_end(self, trainer, pl_module):
        self._unhook()
        self.write(trainer, "test")

    def write(self, trainer, split: str) -> None:
        counts = self.matrix.compute().cpu().long()  # every rank joins the sync
        self.matrix = None
        if not trainer.is_global_zero:
            return
        out = self.out_dir(trainer)
        n = len(counts)
        matrix = [[k, *counts[k].tolist()] for k in range(n)]
        _write_rows(out / f"confusion_{split}.csv", [["true\\pred", *range(n)], *matrix])
        header = ["class", "precision", "recall", "f1", "support"]
        _write_rows(out / f"per_class_{split}.csv", [header, *per_class(counts)])
        save_figure(trainer, plot_confusion(counts, split), f"confusion_{split}", tight=False)


def per_class(counts: torch.Tensor) -> list[list]:
    """Rows of (class, precision, recall, F1, support); 0 where a class is never predicted."""
    tp = counts.diag().double()
    predicted, support = counts.sum(0).double(), counts.sum(1).double()
    precision = torch.where(predicted > 0, tp / predicted.clamp(min=1), 0.0)
    recall = torch.where(support > 0, tp / support.clamp(min=1), 0.0)
    f1 = torch.where(
        precision + recall > 0, 2 * precision * recall / (precision + recall).clamp(min=1e-12), 0.0
    )
    scores = [[round(m[k].item(), 4) for m in (precision, recall, f1)] for k in range(len(tp))]
    return [[k, *scores[k], int(support[k])] for k in range(len(tp))]


def plot_confusion(counts: torch.Tensor, split: str):
    n = len(counts)
    size = min(2 + 0.45 * n, 12)
    fig = figure(size, size)
    # margins in inches for the labels and title (saved without the costly tight box)
    ax = fig.add_axes((0.75 / size, 0.6 / size, 1 - 0.95 / size, 1 - 1.05 / size))
    ax.imshow(counts.numpy(), cmap="Blues")
    if n <= 20:  # numbers stay readable
        peak = counts.max().item() or 1
        for i in range(n):
            for j in range(n):
                v = counts[i, j].item()
                color = "white" if v > peak / 2 else "black"
                ax.text(j, i, v, ha="center", va="center", fontsize=8, color=color)
    ax.set(
        xlabel="predicted",
        ylabel="true",
        xticks=range(n),
        yticks=range(n),
        title=f"{split}: {int(counts.diag().sum())}/{int(counts.sum())} correct",
    )
    return fig


# ------------------------------------------------------------ embeddings
class Embeddings(TaskCallback):
    inspects = "embeddings"

    def __init__(
        self,
        max_points: PosInt = 500,
        perplexity: PosFloat = 30.0,
        max_iter: Annotated[int, Ge(250), "an integer >= 250 (scikit-learn's minimum)"] = 500,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_points, self.perplexity, self.max_iter = max_points, perplexity, max_iter
        self._feats, self._labels, self._seen = [], [], None
        self._pending = None  # (t-SNE future, features, labels) between test end hooks

    def on_test_epoch_start(self, trainer, pl_module):
        self._feats, self._labels = [], []
        self._hook = pl_module.embedding_layer().register_forward_pre_hook(self._capture)

    def _capture(self, module, args):
        self._seen = args[0]

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        held = sum(len(f) for f in self._feats)
        if held >= self.max_points:
            return
        self._seen = None
        _, target = pl_module.scores(batch, "test")  # one more forward, features captured
        feats = pl_module.split_rows(self._seen, batch, "test")  # a graph's: the split's nodes
        keep = self.max_points - held
        self._feats.append(feats[:keep].flatten(1).float().cpu())
        self._labels.append(target[:keep].cpu())

    def on_test_epoch_end(self, trainer, pl_module):
        self._hook.remove()
        if not self._feats or not trainer.is_global_zero:
            return
        feats, labels = torch.cat(self._feats), torch.cat(self._labels)
        self._feats, self._labels = [], []
        # t-SNE (about a second, mostly in scikit-learn's GIL-free gradient code) runs on a
        # thread beside the other callbacks' drawing; its plot is drawn at on_test_end, here
        args = (feats.numpy(), self.perplexity, self.max_iter, trainer.current_epoch)
        pool = ThreadPoolExecutor(1, thread_name_prefix="tsne")
        self._pending = (pool.submit(tsne, *args), feats, labels)
        pool.shutdown(wait=False)

    def on_test_end(self, trainer, pl_module):
        if self._pending is None:
            return
        future, feats, labels = self._pending
        self._pending = None
        xy = future.result()
        out = self.out_dir(trainer)
        rows = [[round(float(a), 4), round(float(b), 4), int(c)] for (a, b), c in zip(xy, labels)]
        _write_rows(out / "tsne.csv", [["x", "y", "label"], *rows])
        fig = figure(5, 5)
        ax = fig.add_subplot()
        points = ax.scatter(xy[:, 0], xy[:, 1], c=labels.numpy(), cmap="tab10", s=8)
        ax.legend(*points.legend_elements(), title="class", fontsize=7, loc="best")
        ax.set(title=f"t-SNE of {len(xy)} test embeddings", xticks=[], yticks=[])
        save_figure(trainer, fig, "tsne")
        projector(trainer, feats, labels)

    def on_exception(self, trainer, pl_module, exception):
        self._pending = None  # the thread ends on its own; nothing is drawn


def tsne(feats, perplexity: float, max_iter: int, seed: int):
    from sklearn.manifold import TSNE

    perplexity = min(perplexity, max(1.0, (len(feats) - 1) / 3))  # sklearn needs < n points
    tsne = TSNE(2, perplexity=perplexity, max_iter=max_iter, init="pca", random_state=seed)
    return tsne.fit_transform(feats)


def projector(trainer, feats: torch.Tensor, labels: torch.Tensor) -> None:
    writers = tensorboards(trainer)
    for writer in writers:
        writer.add_embedding(
            feats, metadata=labels.tolist(), global_step=trainer.global_step, tag="test_embeddings"
        )
    flush(writers)


ALPHA = 0.45  # the heatmap's weight over the input


# --------------------------------------------------------------- gradcam
def last_conv(net: nn.Module) -> nn.Module:
    convs = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))]
    if not convs:
        raise ValueError(f"{type(net).__name__} has no Conv2d/Conv3d layer for Grad-CAM")
    return convs[-1]


def gradcam(
    model: nn.Module, x: torch.Tensor, target: torch.Tensor, layer: nn.Module | None = None
) -> torch.Tensor:
    """Heatmaps (N, *spatial) in [0, 1], upsampled to the input's size.

    Works inside `trainer.test`/`validate`, which run under `torch.inference_mode`: gradients
    are switched back on here, and the input is cloned (an inference tensor cannot require
    grad)."""
    from captum.attr import LayerAttribution, LayerGradCam

    net = getattr(model, "net", model)
    layer = layer or last_conv(net)
    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone().requires_grad_(True)
        attr = LayerGradCam(model, layer).attribute(
            x, target=target.clone(), relu_attributions=True
        )
        mode = "bilinear" if x.dim() == 4 else "trilinear"
        attr = LayerAttribution.interpolate(attr, tuple(x.shape[2:]), interpolate_mode=mode)
    heat = attr.detach()[:, 0]
    peak = heat.flatten(1).amax(1).clamp(min=1e-12).view(-1, *[1] * (heat.dim() - 1))
    return heat / peak


class GradCAM(TaskCallback):
    """`num_samples` first test samples; the map explains the predicted class (or the true one
    with `target: true`)."""

    inspects = "gradcam"

    def __init__(self, num_samples: int = 8, target: str = "pred", **kwargs):
        super().__init__(**kwargs)
        self.num_samples, self.target = num_samples, target
        self._x, self._y = [], []

    def on_test_epoch_start(self, trainer, pl_module):
        self._x, self._y = [], []

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        held = sum(len(x) for x in self._x)
        if held < self.num_samples:
            x, y = batch
            self._x.append(x[: self.num_samples - held])
            self._y.append(y[: self.num_samples - held])

    def on_test_epoch_end(self, trainer, pl_module):
        if not self._x or not trainer.is_global_zero:
            return
        x, y = torch.cat(self._x), torch.cat(self._y)
        self._x, self._y = [], []
        pred = pl_module(x).argmax(1)
        heat = gradcam(pl_module, x, pred if self.target == "pred" else y)
        save_figure(trainer, overlays(x, heat, y, pred), "gradcam", tight=False)  # a mosaic


def middle(t: torch.Tensor) -> torch.Tensor:
    """A 2D view of one sample (C, *spatial): its first channel, middle slice for volumes."""
    t = t[0]
    return t[t.shape[0] // 2] if t.dim() == 3 else t


def overlays(x: torch.Tensor, heat: torch.Tensor, y: torch.Tensor, pred: torch.Tensor):
    """Each input (scaled to [0, 1], grey) with its heatmap blended over it in the jet colormap."""
    from matplotlib import colormaps

    jet = colormaps["jet"]
    panels = []
    for i in range(len(x)):
        img = middle(x[i]).float().cpu()
        img = ((img - img.min()) / (img.max() - img.min() + 1e-12)).numpy()[..., None]
        hot = jet(middle(heat[i : i + 1]).cpu().clamp(0, 1).numpy())[..., :3]
        panels.append((1 - ALPHA) * img + ALPHA * hot)
    labels = [f"true {int(t)} pred {int(p)}" for t, p in zip(y, pred)]
    return mosaic(panels, labels, inches=1.6)


# ------------------------------------------------------------ histograms
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
        if not trainer.is_global_zero:
            return
        grads = {n: p.grad for n, p in pl_module.named_parameters() if p.grad is not None}
        norms = {n: float(g.detach().float().norm()) for n, g in grads.items()}
        if len(norms) > 2:
            low, high, median = outliers(norms, self.ratio)
            where = [
                f"{what} in {', '.join(names)}"
                for what, names in (("vanishing", low), ("exploding", high))
                if names
            ]
            if where:
                epoch = trainer.current_epoch
                log.warning(
                    "gradient norms (epoch %d, median %.3g): %s", epoch, median, "; ".join(where)
                )
        self._histograms(trainer, "grads", grads)

    def on_train_epoch_end(self, trainer, pl_module):
        if self._due(trainer) and trainer.is_global_zero:
            self._histograms(trainer, "weights", dict(pl_module.named_parameters()))

    def _histograms(self, trainer, prefix: str, tensors: dict) -> None:
        writers = tensorboards(trainer)
        step = trainer.global_step
        for writer in writers:
            for name, t in tensors.items():
                writer.add_histogram(f"{prefix}/{name}", t.detach().float().cpu(), step, self.bins)
        flush(writers)


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
