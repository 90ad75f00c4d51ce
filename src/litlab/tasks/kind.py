"""What one task kind declares for every layer of litlab: a plain, frozen record that imports
no torch, so a model/data mismatch or a feature that does not apply to a kind is refused before
any heavy import. The layers read these declarations instead of comparing kind names."""

from dataclasses import dataclass, field
from typing import Literal

from litlab.errors import UserError

#: compression steps (a kind lists those that apply to its nets)
COMPRESSION_STEPS = ("prune_structured", "prune_unstructured", "distill", "quantize")
#: what the kinds of one tensor in, one class out share (images, volumes): a batched tensor
#: exported as is, and an OOD score that also measures how far the inputs are from training's
TENSOR_CLASSIFICATION = {
    "export_spec": "litlab.export.domains:tensor_spec",
    "ood_inputs": True,
}
#: what the graph kinds share: how their nets compress
GRAPH_NETS = {
    # structured pruning: smaller hidden widths (litlab.compression.graph_prune, not
    # Torch-Pruning, whose traced dependency graph does not follow PyG's message passing)
    "compression": COMPRESSION_STEPS,
    # int8 of a graph net: its dense layers only. The message passing around them (gathers,
    # scatters, degree norms) carries indices and per-node sums whose ranges calibrate to zero
    # scales (NaN outputs) and whose rounding costs accuracy for no size or speed.
    "int8_op_types": ("Gemm", "MatMul"),
}
GRAPH_NOTES: dict = {}


@dataclass(frozen=True)
class TaskKind:
    #: the name datamodules declare (`task = ...`) and modules list (`tasks = (...)`)
    name: str
    #: metrics the kind's modules log per split (besides loss): what `model.monitor` may name
    metrics: tuple[str, ...]
    #: export: "module:function" building the export Spec of a loaded run (litlab.export.domains)
    export_spec: str
    #: what the net's inputs are, as "module:Class" (the family kinds of one input type
    #: share, litlab.tasks.inputs): how the service decodes a request (JSON samples, image or
    #: NIfTI uploads, graphs) and warms up, what an exported file must take and its metadata
    #: hold, whether the inputs are one batched tensor (compression, inspect)
    inputs: str = "litlab.tasks.inputs:Samples"
    #: what the net's output columns are, as "module:Class" (the family kinds of one output
    #: type share): their names in an export's metadata, the metric's input from one batch's
    #: outputs, and a served answer (`litlab.tasks.outputs.Classes`: softmax, the top class,
    #: an out-of-distribution score; `litlab.tasks.regression.Values`: numbers in the
    #: target's units)
    outputs: str = "litlab.tasks.outputs:Classes"
    #: the out-of-distribution score also measures the inputs (block-mean PPCA and per-channel
    #: statistics: fixed-size tensors with channels and spatial dims, as whole images or
    #: volumes); False: the classifier's confidence alone
    ood_inputs: bool = False
    #: inspect callbacks (their `inspects` name) that apply
    inspect: tuple[str, ...] = ()
    #: `callbacks=inspect`'s samples figure, as "module:Class" (`collect` per test batch,
    #: `draw` at the end; litlab.tasks.figures: images, volume slices, node accuracy)
    samples_figure: str | None = None
    #: compression steps that apply (each judged by the kind's own test metric)
    compression: tuple[str, ...] = COMPRESSION_STEPS
    #: compress: epochs of fine-tuning / student training when trainer.max_epochs is null,
    #: and the distillation temperature when compress.distill.temperature is null
    compress_epochs: int = 5
    distill_temperature: float = 4.0
    #: compress=distill's default student (the teacher's net, narrowed) trains with this times
    #: the teacher's learning rate
    distill_lr_factor: float = 1.0
    #: compress: the test metric every stage is judged by (None: the model's monitor, on test;
    #: the inputs of export, int8 calibration and latency are the input family's `patches`
    #: where it has them, else the datamodule's tensor batches)
    compress_metric: str | None = None
    #: the share of the test metric an int8 file may lose before it is discarded: one verdict
    #: for compress=quantize (compress.quantize.max_drop null) and export's onnx_int8
    #: (int8_max_drop null)
    quantize_max_drop: float = 0.01
    #: export: the ONNX op types int8 quantizes (None: all)
    int8_op_types: tuple[str, ...] | None = None
    #: federated: the units a dataset is dealt to clients in, each partitioned by a label
    #: (litlab.federated.views): dataset items by their class, whole volumes by their dominant
    #: structure, the nodes of one graph by their class (None: not partitionable)
    federated_units: Literal["items", "volumes", "nodes"] | None = "items"
    #: federated: a client's epochs per round under `federate.local_epochs=auto`
    federated_local_epochs: int = 1
    #: why a feature does not apply, by feature: appended to the refusal
    notes: dict = field(default_factory=dict)

    def refuse_compression(self, step: str) -> None:
        if step not in self.compression:
            fits = ", ".join(self.compression).replace("prune_", "prune.method=")
            step = step.replace("prune_", "prune with compress.prune.method=")
            raise UserError(
                f"compress={step} does not apply to {self.name} models{self._note(step)}; "
                f"what applies: {fits or 'nothing'}"
            )

    def refuse_federated(self) -> None:
        if self.federated_units is None:
            raise UserError(
                f"federate partitions a dataset's units (items, volumes or nodes) by their "
                f"labels; {self.name} data declares none{self._note('federate')}"
            )

    def applies(self, inspects: str) -> bool:
        return inspects in self.inspect

    def hook(self, name: str):
        """The function a "module:function" field names (imported now: it may import torch)."""
        import importlib

        module, _, function = getattr(self, name).partition(":")
        return getattr(importlib.import_module(module), function)

    def output_family(self):
        """An instance of the kind's `outputs` family (imported now)."""
        return self.hook("outputs")()

    def input_family(self):
        """An instance of the kind's `inputs` family (imported now)."""
        return self.hook("inputs")()

    def _note(self, feature: str) -> str:
        return f" ({self.notes[feature]})" if feature in self.notes else ""
