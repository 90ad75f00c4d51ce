"""Knowledge distillation (Hinton et al., 2015): a student learns from a frozen teacher's
softened outputs and from the labels,

    loss = alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE.

The KL term is per position (per sample, or per voxel for segmentation); the label term is
the student's own task loss where its module has one, else CE; T^2 keeps the soft term's
gradients on the scale of the hard one's as T changes. `Distiller` trains the student inside
Lightning; validation and test are the student's own, so its metrics and checkpoints read like
those of any run.

The default student of `compress=distill` (`fitting_student`) is built and counted for this
data at each width, so its `max_params_ratio` bound holds for any data (Cora's 1,433 input
features dominate a GCN's parameters; a digit's 64 pixels do not)."""

import copy
from collections.abc import Callable

import lightning as L
import torch
import torch.nn.functional as F

from litlab.errors import UserError


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    target: torch.Tensor,
    alpha: float,
    temperature: float,
    labelled_logits: torch.Tensor | None = None,
    task_loss=None,
    soft_loss=None,
) -> torch.Tensor:
    """alpha * soft term + (1 - alpha) * label loss. The soft term is T^2 KL over class scores
    (dim 1), averaged over every other position; or `soft_loss(student, teacher)` for outputs
    that are not class scores (regression compares values: no temperature applies). The label
    term scores `labelled_logits` (default: the same logits; node classification: every node
    vs the training ones) against `target` with `task_loss` (default: CE)."""
    hard = student_logits if labelled_logits is None else labelled_logits
    label = (task_loss or F.cross_entropy)(hard, target)
    if soft_loss is not None:
        return alpha * soft_loss(student_logits, teacher_logits) + (1 - alpha) * label
    t = temperature
    soft = (
        F.kl_div(
            F.log_softmax(student_logits / t, 1),
            F.log_softmax(teacher_logits / t, 1),
            reduction="none",
            log_target=True,
        )
        .sum(1)
        .mean()
    )
    return alpha * t * t * soft + (1 - alpha) * label


def check_teacher_fits(
    teacher_task: str, teacher_classes, student_task: str, student_classes
) -> None:
    """A teacher can only teach a student of the same task and classes."""
    if teacher_task != student_task:
        raise UserError(
            f"the teacher was trained for {teacher_task}, the student's data is "
            f"{student_task}: distillation needs the same task"
        )
    if teacher_classes != student_classes:
        raise UserError(
            f"the teacher predicts {teacher_classes} classes, the student's data "
            f"has {student_classes}: distillation needs the same classes"
        )


class Distiller(L.LightningModule):
    """Trains `student` (a LitModule) with `kd_loss` against `teacher` (frozen, eval mode)."""

    def __init__(self, student, teacher, alpha: float = 0.7, temperature: float = 4.0):
        super().__init__()
        if not 0 <= alpha <= 1 or temperature <= 0:
            raise UserError(
                f"compress.distill: alpha={alpha} must be in [0, 1] and "
                f"temperature={temperature} > 0"
            )
        self.student, self.teacher = student, teacher
        self.alpha, self.temperature = alpha, temperature
        self.teacher.requires_grad_(False)
        self.teacher.eval()

    def train(self, mode: bool = True):
        super().train(mode)
        self.teacher.eval()  # Lightning calls train() each epoch: the teacher stays in eval
        return self

    def training_step(self, batch, batch_idx):
        soft, logits, y = self.student.distill_scores(batch)
        with torch.no_grad():
            teacher_soft, _, _ = self.teacher.distill_scores(batch)
        s = self.student  # its own label loss (else CE) and soft loss (else T^2 KL)
        loss = kd_loss(
            soft, teacher_soft, y, self.alpha, self.temperature, logits, s.task_loss, s.soft_loss
        )
        self.log("train/loss", loss, prog_bar=True, on_step=False, on_epoch=True, batch_size=len(y))
        return loss

    def validation_step(self, batch, batch_idx):
        self.student.eval_step("val", batch)

    def test_step(self, batch, batch_idx):
        self.student.eval_step("test", batch)

    def _log_epoch(self, split: str) -> None:
        """The student's metrics for `split`, logged by this (attached) module."""
        s = self.student
        s.update_metrics(split)
        metrics, loss = s.metrics(split), getattr(s, f"{split}_loss")
        if loss.update_called:
            self.log_dict({**metrics.compute(), f"{split}/loss": loss.compute()}, prog_bar=True)
        metrics.reset()
        loss.reset()

    def on_validation_epoch_end(self):
        self._log_epoch("val")

    def on_test_epoch_end(self):
        self._log_epoch("test")

    def configure_optimizers(self):
        s = self.student  # the student's own optimizer and scheduler, on its parameters only
        optimizer = s.optimizer(params=s.parameters())
        if s.scheduler is None:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": s.scheduler(optimizer=optimizer),
                "interval": s.hparams.scheduler_interval,
                "monitor": s.hparams.monitor,
            },
        }


# -------------------------------------------------------------- students
# scale factors tried in order on a net's width, in steps of 0.05: the first student that fits
# is kept, so it lands just under the bound (1.0: a student given narrower on the command line
# is kept as given; a jump from 1.0 to 0.5 had cut such a student at 26% to 7% of its teacher)
SCALES = tuple(round(1.0 - 0.05 * i, 2) for i in range(20))


def candidates(teacher_model: dict):
    """Student model configs, largest first: the teacher's net narrowed (its `narrowed`), or
    first replaced by the smaller net of another family it names (its `student`)."""
    model = copy.deepcopy(teacher_model)
    replacement = getattr(_net(model["net"]["_target_"]), "student", None)
    if replacement is not None:
        model |= copy.deepcopy(replacement)
        yield copy.deepcopy(model)
    target = model["net"]["_target_"]
    narrow = getattr(_net(target), "narrowed", None)
    if narrow is None:
        raise UserError(
            f"compress=distill has no default student for {target} (a net gives one by "
            "narrowed(net_config, scale), see docs/compress.md); name one: "
            "model@compress.distill.student=NAME or +compress.distill.student.net.KEY=VALUE"
        )
    base = model["net"]
    for scale in SCALES:
        yield copy.deepcopy(model) | {"net": {**base, **narrow(base, scale)}}


def _net(target: str):
    """The net class or factory a config names (None for one that cannot be read: refused in
    one line by `candidates`)."""
    try:
        import hydra

        return hydra.utils.get_object(target)
    except Exception:  # noqa: BLE001
        return None


def fitting_student(
    teacher_model: dict, student: dict, count: Callable[[dict], int], ratio: float
) -> dict:
    """The largest narrowing of `student` (a model config) with at most `ratio` x the
    teacher's parameters, counted by `count(model_config)` (the net built for this data)."""
    limit = ratio * count(teacher_model)
    tried = None
    for candidate in candidates(student):
        tried = count(candidate)
        if tried <= limit:
            return candidate
    raise UserError(
        f"compress=distill: no default student has <= {ratio:g} of the teacher's parameters "
        f"(the smallest has {tried:,}); name one with model@compress.distill.student=NAME"
    )


def smaller_student(student: dict, teacher: dict, count) -> None:
    """A student is smaller than its teacher: one line naming both sizes when it is not."""
    mine, theirs = count(student), count(teacher)
    if mine > theirs:
        raise UserError(
            f"compress.distill.student has {mine:,} parameters, more than its teacher's "
            f"{theirs:,}: a student is smaller than its teacher; give it narrower layers (e.g. "
            f"+compress.distill.student.net.channels=...) or leave compress.distill.student "
            f"unset for the default one (at most max_params_ratio of the teacher)"
        )
