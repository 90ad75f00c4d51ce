"""What every domain's LightningModule shares, written once (`LitModule`, and `Classifier`);
the domains' own modules and nets are in litlab.domains.

- the net is an `nn.Module` built from config by the entry point (never a raw config here);
- optimizer and scheduler arrive as partials from config and are built in
  `configure_optimizers` on `self.trainer.model`'s parameters (correct under FSDP too);
- per-split torchmetrics collections, logged per epoch and synced across DDP ranks;
- optional `torch.compile` of the net's forward (state-dict keys stay unchanged).

Hyperparameters saved into checkpoints are plain values only (no modules, no partials), so
checkpoints load with `torch.load(..., weights_only=True)`; the full run config is stored
beside them by `litlab.checkpointing.run_config.RunConfigInCheckpoint`.
"""

import fnmatch
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, MetricCollection

from litlab.bounds import MinMax
from litlab.errors import UserError
from litlab.utils.distributed import synced_by_torchmetrics

SPLITS = ("train", "val", "test")


class LitModule(L.LightningModule):
    #: data kinds this module can train on (checked against the datamodule's `kind`)
    kinds: tuple[str, ...] = ()
    #: names of the metrics make_metrics() returns (glob patterns allowed): a monitor is
    #: checked against them before the run starts
    metric_names: tuple[str, ...] = ("acc", "f1")
    #: of those, the ones validation and test compute but training does not (glob patterns):
    #: a figure of whole volumes, meaningless or too costly on every training batch
    eval_only_metrics: tuple[str, ...] = ()
    #: predictions held before a bulk metric update (see log_step)
    QUEUE_NUMEL = 1 << 16
    #: each queued batch is one item to its metrics (2D segmentation: a volume's slices), so
    #: batches are never concatenated into one update
    batch_is_item = False
    #: where predict_step may write files beside predictions.csv (eval.py's run dir, where
    #: segmentation writes its predicted masks); None: it writes none
    output_dir: Path | None = None

    @classmethod
    def monitorable(cls, name: str) -> bool:
        """True when `name` (e.g. val/acc) is a metric this module logs."""
        split, _, metric = str(name).partition("/")
        if split == "train" and cls._eval_only(metric):
            return False
        return split in SPLITS and any(
            fnmatch.fnmatchcase(metric, p) for p in (*cls.metric_names, "loss")
        )

    @classmethod
    def monitor_examples(cls) -> list[str]:
        names = [f"{s}/{m}" for s in ("val", "train") for m in (*cls.metric_names, "loss")]
        return [name for name in names if cls.monitorable(name)]

    def __init__(
        self,
        net: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        scheduler_interval: Literal["epoch", "step"] = "epoch",
        monitor: str = "val/acc",
        monitor_mode: MinMax = "max",
        compile: bool = False,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler"], logger=False)
        self.net = net
        #: partials from config, built in configure_optimizers (and by compress=distill's
        #: Distiller for a student) on the parameters
        self.optimizer, self.scheduler = optimizer, scheduler
        self._set_forward(net)
        for split in SPLITS:
            metrics = self.make_metrics()
            if split == "train":
                for name in [n for n in metrics if self._eval_only(n)]:
                    metrics.pop(name)
            setattr(self, f"{split}_metrics", metrics.clone(prefix=f"{split}/"))
            # a metric, not a logged float: Lightning's own DDP mean truncates the synced
            # sample count to an integer when ranks hold unequal shards (181 + 180 -> 180)
            setattr(self, f"{split}_loss", MeanMetric())
        self._queues = {split: [] for split in SPLITS}  # see log_step
        self._queued_numel = dict.fromkeys(SPLITS, 0)

    def make_metrics(self) -> MetricCollection:
        """The metrics of one split (cloned for train/val/test)."""
        raise NotImplementedError

    @classmethod
    def _eval_only(cls, metric: str) -> bool:
        return any(fnmatch.fnmatchcase(metric, p) for p in cls.eval_only_metrics)

    def metrics(self, split: str) -> MetricCollection:
        return getattr(self, f"{split}_metrics")

    @property
    def test_reads(self) -> int:
        """How many reads of each test input the test step averages (test-time augmentation):
        an exported file reads once, so an int8 file is judged against its fp32 source read
        the same way when this is more than 1 (compression/recipe.judge_int8)."""
        return 1

    def on_fit_start(self) -> None:
        """A training step that cannot fit in memory (images of the user's data.image_size):
        one line before it runs, from the datamodule that knows its items' size."""
        from litlab.data import SplitDataModule

        if isinstance(self.trainer.datamodule, SplitDataModule):  # not loaders given to fit
            self.trainer.datamodule.check_training_step(self.net, self.device)

    def setup(self, stage: str) -> None:
        from litlab.compat.lightning import quick_result_moves
        from litlab.utils.distributed import unpad_eval_shards

        unpad_eval_shards()  # exact val/test metrics under DDP, in every process that runs
        if self.hparams.compile and self._forward is self.net:
            self._set_forward(torch.compile(self.net))
        if not self.__dict__.get("_moves_quick"):  # self.log's cost, see compat.lightning
            quick_result_moves(install=True)
            self.__dict__["_moves_quick"] = True

    def teardown(self, stage: str) -> None:
        from litlab.compat.lightning import quick_result_moves

        if self.__dict__.pop("_moves_quick", False):
            quick_result_moves(install=False)

    def _set_forward(self, fn) -> None:
        """What forward calls: the net or its compiled wrapper. Kept out of nn.Module's registry,
        so state-dict keys are the net's alone (`net.*`) and a checkpoint of a compiled run
        loads into a plain one and back."""
        self.__dict__["_forward"] = fn

    def forward_through(self, fn) -> None:
        """Run `fn` wherever the net would run (every step calls `self(...)`): eval.py scores
        an exported file this way, with the module's own steps, loss and metrics."""
        self._set_forward(fn)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Before the weights are loaded: a checkpoint of another net (another model=, other
        model.net settings) is refused in one line that names the net it holds. Checkpoints
        written before _set_forward held a second copy of the net's weights under `_forward.`
        (or `_forward._orig_mod.`): it is dropped, `net.*` holds the same tensors."""
        if "state_dict" not in checkpoint:  # trainer=fsdp on CPUs: the strategy loaded it
            return
        ours = self.state_dict()
        theirs = checkpoint.get("state_dict", {})
        for key in [k for k in theirs if k.startswith("_forward.")]:
            del theirs[key]
        wrong = [k for k in ours if k in theirs and tuple(theirs[k].shape) != tuple(ours[k].shape)]
        missing = [k for k in ours if k not in theirs]
        extra = [k for k in theirs if k not in ours]  # Lightning's strict load: a traceback
        if not wrong and not missing and not extra:
            return
        net = dict((checkpoint.get("litlab_config") or {}).get("model", {}).get("net") or {})
        held = ", ".join(f"{k}={v}" for k, v in net.items()) or "an unknown net"
        if wrong:
            there, here = list(theirs[wrong[0]].shape), list(ours[wrong[0]].shape)
            detail = f"{wrong[0]} has shape {there} there, {here} here"
        elif missing:
            detail = f"it lacks {missing[0]}"
        else:
            detail = f"it has the unexpected entry {extra[0]}"
        raise UserError(
            f"the checkpoint holds another net ({held}): {detail}; use the "
            f"model settings it was trained with, or another checkpoint"
        )

    def forward(self, *args, **kwargs):
        return self._forward(*args, **kwargs)

    # What the layers after training ask of any module, whatever its batches look like
    # (compress=distill, callbacks=inspect, the samples figures): an (inputs, targets) batch
    # here; a module of other batches overrides them (graphs, volume dicts).
    #: compress=distill's label term (logits, target) -> loss; None: cross-entropy
    task_loss = None
    #: compress=distill's soft term for outputs that are not class scores (student outputs,
    #: teacher outputs) -> loss; None: T^2 KL of the class scores softened by T
    soft_loss = None

    def scores(self, batch, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs, targets) of the items of `batch` that count for `split` on this rank."""
        x, y = batch
        return self(x), y

    def distill_scores(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(outputs the soft term compares, outputs of the labelled items, their labels)."""
        logits, y = self.scores(batch, "train")
        return logits, logits, y

    def embedding_layer(self) -> nn.Module:
        """The layer whose input is an item's embedding: the net's last nn.Linear."""
        linears = [m for m in self.net.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise ValueError(
                f"{type(self.net).__name__} has no nn.Linear head to take features from"
            )
        return linears[-1]

    def split_rows(self, values: torch.Tensor, batch, split: str) -> torch.Tensor:
        """The rows of a whole batch's `values` that `scores` answers for `split`."""
        return values

    def eval_step(self, split: str, batch) -> None:
        """One validation or test batch: compute the loss and call `log_step(split, ...)`."""
        raise NotImplementedError

    def validation_step(self, batch, batch_idx):
        self.eval_step("val", batch)

    def test_step(self, batch, batch_idx):
        self.eval_step("test", batch)

    @staticmethod
    def class_columns(logits: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-sample columns of a classifier for eval.py's predictions.csv."""
        probs = logits.softmax(1)
        confidence, pred = probs.max(1)
        return {
            "target": target,
            "pred": pred,
            "confidence": confidence,
            **{f"prob_{k}": probs[:, k] for k in range(probs.shape[1])},
        }

    def log_step(self, split: str, loss: torch.Tensor, preds, target, batch_size: int) -> None:
        """Queue the batch for the split's metrics and mean loss, logged once per epoch.

        A torchmetrics update costs ~0.4 ms whatever the batch size (and `self.log` ~1 ms),
        which a small model's 10 ms step feels (bench/overhead.py): predictions are queued and
        the metrics updated in bulk, once `QUEUE_NUMEL` elements are waiting or at epoch end.
        Big outputs (3D masks) exceed it at once, so they are never hoarded."""
        queue = self._queues[split]
        queue.append((preds.detach(), target, loss.detach(), batch_size))
        self._queued_numel[split] += preds.numel()
        if self._queued_numel[split] >= self.QUEUE_NUMEL:
            self.update_metrics(split)

    def update_metrics(self, split: str) -> None:
        """Feed the queued batches to the split's metrics (one update when shapes allow)."""
        queue = self._queues[split]
        if not queue:
            return
        preds, target, loss, sizes = zip(*queue)
        same = all(
            p.shape[1:] == preds[0].shape[1:] and t.shape[1:] == target[0].shape[1:]
            for p, t in zip(preds, target)
        )
        if same and len(queue) > 1 and not self.batch_is_item:  # not volumes of other sizes
            preds, target = [torch.cat(preds)], [torch.cat(target)]
        for p, t in zip(preds, target):
            self.metrics(split).update(p, t)
        loss = torch.stack(loss).float()  # float32 weights: bf16 would round sizes above 256
        weights = torch.tensor(sizes, dtype=torch.float32, device=loss.device)
        getattr(self, f"{split}_loss").update(loss, weights)
        queue.clear()
        self._queued_numel[split] = 0

    def log_epoch(self, split: str) -> None:
        """Log the epoch's metrics and mean loss, computed over all DDP ranks, then reset."""
        self.update_metrics(split)
        metrics, loss = self.metrics(split), getattr(self, f"{split}_loss")
        if not loss.update_called:  # e.g. limit_val_batches=0
            return
        values = {**metrics.compute(), f"{split}/loss": loss.compute()}  # synced by torchmetrics
        synced_by_torchmetrics(values)  # no advice to sync them again (utils.distributed)
        self.log_dict(values, prog_bar=True)
        metrics.reset()
        loss.reset()

    def on_train_epoch_end(self) -> None:
        self.log_epoch("train")

    def on_validation_epoch_end(self) -> None:
        self.log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self.log_epoch("test")

    def configure_model(self) -> None:
        """Under trainer=fsdp on CPUs (Lightning's ModelParallelStrategy, torch's FSDP2): shard
        the net's parameters over the processes, each layer with parameters a unit, then the
        net. A no-op under every other strategy (no device mesh)."""
        from litlab.compat.lightning import device_mesh

        mesh = device_mesh(self)
        if mesh is None or getattr(self, "_sharded", False):
            return
        from torch.distributed.fsdp import fully_shard

        mesh = mesh["data_parallel"] if mesh.mesh_dim_names else mesh
        # bottom-up (FSDP2 wants inner units first): reversed pre-order puts children first
        for module in reversed(list(self.net.modules())):
            direct = any(p.requires_grad for p in module.parameters(recurse=False))
            if module is not self.net and direct:
                fully_shard(module, mesh=mesh)
        fully_shard(self.net, mesh=mesh)
        self._sharded = True

    def configure_optimizers(self):
        optimizer = self.optimizer(params=self.trainer.model.parameters())
        if self.scheduler is None:
            return optimizer
        scheduler = {
            "scheduler": self.scheduler(optimizer=optimizer),
            "interval": self.hparams.scheduler_interval,
            "monitor": self.hparams.monitor,
        }
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class Classifier(LitModule):
    """A LitModule for `(x, y)` batches scored by cross-entropy: the eval and predict steps the
    image and volume classifiers share. `metric_preds` is what their metrics take."""

    def metric_preds(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(1)

    def eval_step(self, split: str, batch):
        x, y = batch
        logits = self(x)
        self.log_step(split, F.cross_entropy(logits, y), self.metric_preds(logits), y, len(y))

    def predict_step(self, batch, batch_idx) -> dict[str, torch.Tensor]:
        """Per-sample columns for eval.py's predictions.csv."""
        x, y = batch
        return self.class_columns(self(x), y)
