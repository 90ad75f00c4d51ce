"""Input mixins of the kinds whose inputs are one batched float tensor, samples along dim 0:
table rows and other fixed-size samples (`TensorInputs`: JSON only) and images (`ImageInputs`:
PNG/JPEG uploads too); and the image classification kind. The methods import what they use
(numpy, torch, PIL): a kind's declarations stay light."""

from itertools import islice

from litlab.bounds import MAX_IMAGE_SIDE
from litlab.tasks import IMAGE_CLASSIFICATION, checks
from litlab.tasks.figures import ImageGrid
from litlab.tasks.kind import Classes, Kind, Spec, register_kind
from litlab.tasks.units import ItemUnits

FLOAT, INT64 = "tensor(float)", "tensor(int64)"
#: the layout name of a batched tensor, by its number of dimensions
LAYOUTS = {2: "NF", 3: "NCL", 4: "NCHW", 5: "NCDHW"}


class TensorInputs:
    """One batched float tensor of fixed-size samples, sent as JSON (`{"inputs": [...]}`)."""

    batched_tensor = True
    #: requests of several samples may share one ONNX Runtime run (micro-batching)
    batchable = True
    #: export stores the training images' background (transparent uploads are composited on it)
    background = False
    #: what the model takes instead of file uploads (the 415 answer names it)
    json_words = "inputs"
    units = ItemUnits()

    def net_input(self, batch):
        """The net's input tensor of a training batch (callbacks=inspect's model graph)."""
        return batch[0]

    def expected_inputs(self, layout: dict) -> list[tuple[str, str, list]]:
        return [("x", FLOAT, layout["x"]["shape"])]

    def check_inputs(self, inputs: dict) -> int | None:
        checks.sample_shape(inputs)
        return None

    def zeros(self, layout: dict, items: int) -> tuple:
        import numpy as np

        shape = [int(s) for s in layout["x"]["shape"][1:]]
        return (np.zeros((items, *shape), np.float32),)

    def decode(self, data: dict, layout: dict, max_items: int):
        """{"inputs": [sample, ...]}, each sample in the model's input shape (as it takes it)."""
        import numpy as np

        shape = layout["x"]["shape"]
        if "inputs" not in data:
            raise checks.BadRequest("The JSON body needs an 'inputs' key: a list of samples.", 422)
        items = data["inputs"]
        checks.count(len(items) if isinstance(items, list) else 1, max_items)
        x = checks.array(items, "inputs", np.float32, len(shape))
        if list(x.shape[1:]) != [int(s) for s in shape[1:]]:
            raise checks.BadRequest(
                f"Each sample must have shape {list(shape[1:])}, not {list(x.shape[1:])}.", 422
            )
        return x

    async def json(self, predictor, data: dict) -> dict:
        x = self.decode(data, predictor.runner.layout, predictor.max_batch)
        return await predictor.answer_batch(x.astype("float32"))

    async def uploads(self, predictor, raw: list[bytes], names: list[str]):
        message = f"This model takes JSON ({self.json_words}), not file uploads."
        raise checks.BadRequest(message, 415)

    async def warm_up(self, predictor) -> None:
        (x,) = self.zeros(predictor.runner.layout, 1)
        await self.json(predictor, {"inputs": x.tolist()})

    def patches(self, datamodule, count: int, start: int = 0):
        """Training inputs that cover whole items (patch-sized crops), stacked; None: the
        datamodule's (inputs, labels) batches are the net's inputs."""
        return

    def input_layout(self, dm, x) -> dict:
        """What an exported file's metadata says of its inputs: shape, dtype, layout and what
        the datamodule says they are (`normalization`)."""
        layout = LAYOUTS.get(x.dim(), f"{x.dim()}-d")
        shape = ["batch", *x.shape[1:]]
        return {
            "x": {"shape": shape, "dtype": "float32", "layout": layout, **self.preprocessing(dm)}
        }

    def preprocessing(self, dm) -> dict:
        return {"normalization": dm.normalization}

    def export_spec(self, run) -> Spec:
        """Any net of one batched tensor: preprocessed as in training (the datamodule's own
        batch transfer), one row of outputs per sample (the kind's `names` read them)."""
        dm = run.datamodule
        dm.setup("test")

        def batches(dataset):
            for x, y in dm.loader(dataset, train=False):  # no trainer: no augmentation
                yield dm.on_after_batch_transfer((x, y), 0)

        x, _ = next(batches(dm.test_set))
        return Spec(
            self.name,
            ["x"],
            {"x": {0: "batch"}},
            (x[:2],),
            [(x[:1],), (x,)],
            self.input_layout(dm, x),
            self.names(run.model, dm),
            lambda: ((b[:1], b[1]) for b in batches(dm.test_set)),
            lambda k: ((b[0],) for b in islice(batches(dm.train_set), k)),
            lambda predict, inputs: self.metric_input(predict(*inputs)),
        )

    def ood_inputs(self, spec) -> list:
        """Training inputs (numpy batches) the out-of-distribution score's input model is
        fitted on; none: the score is the classifier's confidence alone."""
        return []


class MeasuredInputs(TensorInputs):
    """Fixed-size tensors with channels and spatial dims (whole images, volumes): the
    out-of-distribution score also measures how far the inputs are from the training ones
    (block-mean PPCA and per-channel statistics, litlab.export.ood)."""

    def ood_inputs(self, spec) -> list:
        return [b[0].numpy() for b in spec.calibration(100_000)]


class ImageInputs(MeasuredInputs):
    """Images: PNG/JPEG uploads (or JSON images), decoded to the model's size and
    normalization, several to a request. Their datamodule has `mean`, `std` (per channel),
    `image_size`, `channels` and how an image of another size is fitted (`fit`)."""

    background = True

    def preprocessing(self, dm) -> dict:
        scale = "pixel / 255 (uint8) or as stored in [0, 1]"
        return {"normalization": {"scale": scale, "mean": list(dm.mean), "std": list(dm.std)}}

    def input_layout(self, dm, x) -> dict:
        layout = super().input_layout(dm, x)
        layout["image_size"], layout["channels"] = dm.image_size, dm.channels
        if dm.fit:  # how the service fits an image of another size
            layout["fit"] = dm.fit
        return layout

    def check_inputs(self, inputs: dict) -> int:
        size = checks.integer(inputs.get("image_size"), "inputs.image_size", 1, MAX_IMAGE_SIDE)
        channels = inputs.get("channels")
        checks.require(
            type(channels) is int and channels in (1, 3),
            f"inputs.channels is {str(channels)[:40]!r}; expected 1 or 3",
        )
        shape = checks.listed(inputs["x"].get("shape"), "inputs.x.shape", 4)
        checks.require(
            shape[1:] == [channels, size, size],
            f"inputs.x.shape is {shape}; expected ['batch', {channels}, {size}, {size}]",
        )
        checks.normalization(inputs["x"].get("normalization"), channels)
        background = inputs.get("background", [0.0] * channels)
        for v in checks.listed(background, "inputs.background", channels):
            checks.check_number(v, "a background value", 0, 1)
        fit = inputs.get("fit", "resize")
        checks.require(
            fit in ("resize", "pad"),
            f"inputs.fit is {str(fit)[:40]!r}; expected resize or pad (how an image of another "
            "size is fitted)",
        )
        return channels

    async def uploads(self, predictor, raw: list[bytes], names: list[str]):
        checks.count(len(raw), predictor.max_batch, "files")
        return await predictor.images(raw)

    async def warm_up(self, predictor) -> None:
        """A blank image of the model's size and one twice as wide with alpha (the resize and
        composite paths)."""
        import io

        from PIL import Image

        size = int(predictor.runner.layout["image_size"])
        mode = "L" if predictor.channels == 1 else "RGB"
        for img in (Image.new(mode, (size, size)), Image.new("RGBA", (size * 2, size))):
            buffer = io.BytesIO()
            img.save(buffer, "PNG")
            await predictor.images([buffer.getvalue()])
        await predictor.offload(predictor.decode_all, [predictor.header(buffer.getvalue())])


@register_kind
class ImageClassification(ImageInputs, Classes, Kind):
    """Images in, one class per image out (vision: digits, MNIST, CIFAR-10, image folders)."""

    name = IMAGE_CLASSIFICATION
    metrics = ("acc", "f1")
    inspect = ("samples", "confusion", "gradcam", "embeddings", "histograms", "model_graph")
    samples_figure = ImageGrid
