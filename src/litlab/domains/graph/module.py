"""Graph learning: node classification on one full graph, and graph classification on
mini-batches of graphs. One module for both (the datamodule's `kind`, passed through `dims`,
says whether its nets pool a graph's nodes), so `model=gnn` trains on any graph data config.

DDP, node classification: every rank holds the whole graph and runs the full-batch forward;
the nodes of each mask are dealt out between ranks (`idx[rank::world_size]`). Training: each
rank's loss covers its share of the training nodes and DDP averages the gradients, which equals
the single-process gradient when the shares are equal in size. Evaluation: each rank scores its
share only, so torchmetrics' sync counts every node exactly once (equal metrics to 1 process).
Graph classification: the datamodule splits the graphs between ranks (no duplicates at eval).
"""

import torch
import torch.nn.functional as F
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from litlab import tasks
from litlab.compat.lightning import attached_trainer
from litlab.models import LitModule
from litlab.tasks import GRAPH_CLASSIFICATION, NODE_CLASSIFICATION


class GNNClassifier(LitModule):
    kinds = (NODE_CLASSIFICATION, GRAPH_CLASSIFICATION)

    def __init__(
        self,
        net,
        optimizer,
        num_classes: int,
        kind: str = NODE_CLASSIFICATION,
        scheduler=None,
        **kwargs,
    ):
        if kind not in self.kinds:
            raise ValueError(f"kind={kind} is not one of {self.kinds}")
        self.num_classes = num_classes
        super().__init__(net, optimizer, scheduler, **kwargs)

    def make_metrics(self) -> MetricCollection:
        return MetricCollection(
            {
                # labels come from our own datamodules: skip the per-step checks (a unique() each)
                "acc": MulticlassAccuracy(self.num_classes, average="micro", validate_args=False),
                "f1": MulticlassF1Score(self.num_classes, average="macro", validate_args=False),
            }
        )

    @property
    def node_level(self) -> bool:
        return not tasks.get(self.hparams.kind).graph_level

    def share(self, mask: torch.Tensor) -> torch.Tensor:
        """This rank's nodes of a mask (all of them in a single process)."""
        idx = mask.nonzero().view(-1)
        world = self.trainer.world_size if attached_trainer(self) is not None else 1
        return idx[self.global_rank :: world] if world > 1 else idx

    def scores(self, batch, split: str):
        """(logits, targets) of the nodes or graphs that count for `split` on this rank."""
        if self.node_level:
            idx = self.share(batch[f"{split}_mask"])
            return self(batch.x, batch.edge_index)[idx], batch.y[idx]
        return self(batch.x, batch.edge_index, batch.batch), batch.y.view(-1)

    def distill_scores(self, batch):
        """Node classification: the soft term covers every node of the graph, as in GLNN
        (Zhang et al., 2022): the teacher's predictions on the unlabelled nodes (140 of Cora's
        2,708 carry a training label) are what a small student learns most from; the labels
        only the training nodes'. Graphs: the batch's."""
        if not self.node_level:
            return super().distill_scores(batch)
        every = self(batch.x, batch.edge_index)
        idx = self.share(batch["train_mask"])
        return every, every[idx], batch.y[idx]

    def embedding_layer(self):
        """Node classification: the last message-passing layer, whose input is each node's
        embedding; graphs: the classifier of the pooled graph."""
        return self.net.convs[-1] if self.node_level else super().embedding_layer()

    def split_rows(self, values, batch, split: str):
        return values[self.share(batch[f"{split}_mask"])] if self.node_level else values

    def training_step(self, batch, batch_idx):
        return self.eval_step("train", batch)

    def eval_step(self, split: str, batch) -> torch.Tensor:
        logits, y = self.scores(batch, split)
        loss = F.cross_entropy(logits, y)
        self.log_step(split, loss, logits.argmax(1), y, len(y))
        return loss

    def predict_step(self, batch, batch_idx) -> dict[str, torch.Tensor]:
        """Per-node (or per-graph) columns for eval.py's predictions.csv."""
        trainer = attached_trainer(self)
        split = trainer.datamodule.predict_split if trainer is not None else "test"
        if self.node_level:
            idx = batch[f"{split}_mask"].nonzero().view(-1)
            logits, y, ids = self(batch.x, batch.edge_index)[idx], batch.y[idx], {"node": idx}
        else:
            logits, y = self(batch.x, batch.edge_index, batch.batch), batch.y.view(-1)
            ids = {}
        return {**ids, **self.class_columns(logits, y)}
