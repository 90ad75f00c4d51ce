"""How the features cluster: the test samples' penultimate features (the input of the last
linear layer; for node classification the input of the last graph conv, i.e. node embeddings),
projected to 2D with scikit-learn's t-SNE and coloured by class. Capped at `max_points`; the
raw features also go to TensorBoard's projector."""

import csv
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

import torch

from litlab.bounds import Ge, PosFloat, PosInt
from litlab.callbacks.inspect.base import TaskCallback, flush, save_figure, tensorboards
from litlab.tasks.figures import figure


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
        with open(out / "tsne.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["x", "y", "label"])
            w.writerows(
                [round(float(a), 4), round(float(b), 4), int(c)] for (a, b), c in zip(xy, labels)
            )
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
