"""What a kind is: a class whose attributes are its declarations (read before any heavy import,
so a model/data mismatch or a feature that does not apply is refused at once) and whose methods
are its behaviour, which every layer after training calls: export (`export_spec`), the service
(`json`, `uploads`, `warm_up`, `check_inputs`, ...), federated clients (`units`), inspect
(`samples_figure`). Shared behaviour comes from an input mixin (litlab.tasks.tensors,
volumes, graphs: what goes in) and an output mixin (below: what comes out: `Classes`,
`PixelClasses`; a kind whose output is new writes its own in its module, as
litlab.tasks.regression.Values), as PyG's layers subclass `MessagePassing`; `@register_kind`
enters the class in the registry, as timm's `@register_model` does, and refuses a kind that
lacks a method a layer needs. numpy is imported by the methods that use it: a kind's
declarations stay light."""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from litlab.errors import UserError

if TYPE_CHECKING:
    import torch


#: compression steps (a kind lists those that apply to its nets)
COMPRESSION_STEPS = ("prune_structured", "prune_unstructured", "distill", "quantize")


@dataclass
class Spec:
    """What export (and compression's ONNX files) need of a loaded run: built by its kind."""

    kind: str
    input_names: list[str]
    dynamic: dict  # {input: {axis: name or torch.export.Dim}}
    example: tuple  # export inputs (a batch of >= 2 where batched)
    held_out: list[tuple]  # verification inputs, from the test split (other sizes too)
    layout: dict  # shapes, dtypes, preprocessing: stored as metadata
    outputs: list[str]  # what each output column is (the kind's `names`)
    test_batches: Callable[[], Iterator[tuple[tuple, object]]]  # (inputs, target)
    calibration: Callable[[int], Iterator[tuple]]  # up to n input tuples from the train split
    score: Callable = None  # (predict, inputs) -> the metric's input from one batch
    output_names: list[str] = field(default_factory=lambda: ["logits"])
    #: class probabilities of one batch (N, classes, ...) for the out-of-distribution score;
    #: None: `score` gives them (classifiers), or the kind's outputs carry no confidence
    probs: Callable | None = None


class Kind(ABC):
    #: the name datamodules declare (`kind = ...`) and modules list (`kinds = (...)`)
    name: str
    #: metrics the kind's modules log per split (besides loss): what `model.monitor` may name
    metrics: tuple[str, ...]
    #: inspect callbacks (their `inspects` name) that apply
    inspect: tuple[str, ...] = ()
    #: compression steps that apply (each judged by the kind's own test metric)
    compression: tuple[str, ...] = COMPRESSION_STEPS
    #: compress: epochs of fine-tuning / student training when trainer.max_epochs is null,
    #: and the distillation temperature when compress.distill.temperature is null
    compress_epochs: int = 5
    distill_temperature: float = 4.0
    #: compress=distill's default student (the teacher's net, narrowed) trains with this times
    #: the teacher's learning rate
    distill_lr_factor: float = 1.0
    #: compress: the test metric every stage is judged by (None: the model's monitor, on test)
    compress_metric: str | None = None
    #: the share of the test metric an int8 file may lose before it is discarded: one verdict
    #: for compress=quantize (compress.quantize.max_drop null) and export's onnx_int8
    quantize_max_drop: float = 0.01
    #: export: the ONNX op types int8 quantizes (None: all)
    int8_op_types: tuple[str, ...] | None = None
    #: federated: a client's epochs per round under `federate.local_epochs=auto`
    federated_local_epochs: int = 1
    #: why a feature does not apply, by feature: appended to the refusal
    notes: ClassVar[dict] = {}

    # -- what goes in (an input mixin): export, serving, compression, inspect
    #: the inputs are one batched tensor, samples along dim 0 (Torch-Pruning's trace, int8
    #: calibration batches, latency per batch size, a forward hook's output)
    batched_tensor: bool
    #: federated: the units a dataset is dealt to clients in (litlab.tasks.units), each
    #: partitioned by a label; None: not partitionable
    units = None

    @abstractmethod
    def export_spec(self, run) -> Spec:
        """The export Spec of a loaded run (`litlab.runs.rebuild.load_run`)."""

    @abstractmethod
    def check_inputs(self, inputs: dict) -> int | None:
        """Raise `checks.Bad` for an exported file's `inputs` metadata this kind cannot serve;
        the channels the out-of-distribution input model is checked against (None: none)."""

    @abstractmethod
    def expected_inputs(self, layout: dict) -> list[tuple[str, str, list]]:
        """(name, ONNX type, shape from the layout) of each input the service feeds."""

    @abstractmethod
    def zeros(self, layout: dict, items: int) -> tuple:
        """The service's warm-up input: `items` items of zeros."""

    @abstractmethod
    async def json(self, predictor, data: dict) -> dict:
        """A JSON body's answer (`predictor`: the service's decode pool, limits and model)."""

    @abstractmethod
    async def uploads(self, predictor, raw: list[bytes], names: list[str]):
        """Uploaded files' answer (a dict, or (file bytes, fields)); 415 where none apply."""

    @abstractmethod
    async def warm_up(self, predictor) -> None:
        """One request of each shape the model will see, through the whole path."""

    # -- what comes out (an output mixin): export metadata, metrics, the served answer
    #: the metadata key of the output columns' names
    names_key: str

    @abstractmethod
    def names(self, model, datamodule) -> list[str]:
        """What each output column is called."""

    @abstractmethod
    def metric_input(self, outputs):
        """What the kind's torchmetrics take from one batch's outputs."""

    @abstractmethod
    def prepare(self, outputs):
        """A served batch's outputs (numpy) as the answer reads them."""

    @abstractmethod
    def answer(self, names: list[str], prepared) -> dict:
        """One request's JSON fields."""

    @abstractmethod
    def output_rank(self, layout: dict) -> tuple[int, str]:
        """The rank of the output an exported file must answer, and its words."""

    #: the prepared outputs are class probabilities, which the out-of-distribution score
    #: reads (litlab.export.ood); outputs without them export no such score
    confidence = False

    def strata(self, train_labels, heldout_labels):
        """The classes federated partitions deal units out by."""
        return train_labels, heldout_labels

    def png(self, answer: dict) -> bytes | None:
        """The answer as a PNG (`Accept: image/png`): None, only label maps have one."""
        return None

    def at_image_sizes(self, answer: dict, sizes: list[tuple[int, int]], fit) -> dict:
        """The answer for uploaded images of `sizes` ((width, height) each), fitted to the
        model's size by `fit` ("pad" or a resize): one value per image needs nothing."""
        return answer

    def samples_figure(self, count: int):
        """`callbacks=inspect`'s samples figure, where "samples" is in `inspect`: a kind sets
        this to its `SamplesFigure` class (litlab.tasks.figures), which takes the count."""
        raise NotImplementedError(f"{self.name} draws no samples figure")

    def export_net(self, net):
        """The net as export traces it (graph pooling sized symbolically)."""
        return net

    def refuse_compression(self, step: str) -> None:
        if step not in self.compression:
            fits = ", ".join(self.compression).replace("prune_", "prune.method=")
            step = step.replace("prune_", "prune with compress.prune.method=")
            raise UserError(
                f"compress={step} does not apply to {self.name} models{self._note(step)}; "
                f"what applies: {fits or 'nothing'}"
            )

    def federated_units(self):
        """The units federated partitions deal out; one line for a kind without any."""
        if self.units is None:
            raise UserError(
                f"federate partitions a dataset's units (items, volumes or nodes) by their "
                f"labels; {self.name} data declares none{self._note('federate')}"
            )
        return self.units

    def federated_labels(self, dm):
        """(training units' labels, held-out units' labels) of a set-up datamodule, as the
        kind's output strata read them (classes; values: their quantile)."""
        return self.strata(*self.federated_units().labels(dm))

    def applies(self, inspects: str) -> bool:
        return inspects in self.inspect

    def _note(self, feature: str) -> str:
        return f" ({self.notes[feature]})" if feature in self.notes else ""


_REGISTRY: dict[str, Kind] = {}


def register_kind(cls: type[Kind]) -> type[Kind]:
    """Class decorator: `cls` is a kind every layer knows by its `name`. One line naming the
    class when it lacks a method a layer needs or its name is another class's."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    declared = ("name", "metrics", "batched_tensor", "names_key")  # annotated above, no value
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    missing += [name for name in declared if name not in dir(cls)]
    if missing:
        raise UserError(
            f"kind class {where} lacks {', '.join(missing)}: a kind inherits an input mixin and "
            "an output mixin of litlab.tasks and sets name and metrics (docs/new_task.md)"
        )
    known = _REGISTRY.get(cls.name)
    if known is not None and f"{type(known).__module__}.{type(known).__qualname__}" != where:
        raise UserError(
            f"kind {cls.name!r} is registered twice: by {type(known).__module__}."
            f"{type(known).__qualname__} and by {where}; give one another name"
        )
    _REGISTRY[cls.name] = cls()
    return cls


def registered() -> dict[str, Kind]:
    return _REGISTRY


# --------------------------------------------------------------- outputs
class Classes:
    """Class scores out (per sample, per node, per graph): probabilities by softmax, the most
    probable class by name."""

    names_key = "classes"
    confidence = True

    @staticmethod
    def names(model, datamodule) -> list[str]:
        names = getattr(datamodule, "class_names", None)
        return [str(c) for c in names or range(model.num_classes)]

    @staticmethod
    def metric_input(outputs):
        return outputs.softmax(1)

    @staticmethod
    def output_rank(layout: dict) -> tuple[int, str]:
        return 2, "class scores (items x classes)"

    @staticmethod
    def prepare(outputs):
        """Row-wise softmax in float64; a row with inf or NaN becomes NaN (the service's
        finiteness check names it), silently."""
        import numpy as np

        logits = outputs.astype(np.float64)
        with np.errstate(all="ignore"):
            z = np.exp(logits - logits.max(axis=1, keepdims=True))
            return z / z.sum(axis=1, keepdims=True)

    @staticmethod
    def answer(names: list[str], probs) -> dict:
        import numpy as np

        ids = probs.argmax(1)
        return {
            "predictions": [names[i] for i in ids],
            "class_ids": ids.tolist(),
            "probabilities": np.round(probs, 6).tolist(),
            "classes": names,
        }


class PixelClasses(Classes):
    """Class scores per pixel or voxel (N, classes, *spatial): an output of the input's rank."""

    @staticmethod
    def output_rank(layout: dict) -> tuple[int, str]:
        return len(layout["x"]["shape"]), "a mask's class scores"


def class_map(scores: "torch.Tensor") -> "torch.Tensor":
    """The class index of every pixel or voxel of class scores (N, C, ...): `argmax(1)`'s
    answer (the first class among equal scores), computed by `max(1)`, which on a CPU is
    10-15x faster for maps (a 2x3x40x56x40 batch: 1 ms against 15 ms, a tenth of a 3D U-Net's
    training step): torch's argmax reduces a middle dimension element by element."""
    return scores.max(1).indices
