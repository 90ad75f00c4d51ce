"""Input families: what a net's inputs are, for the layers after training. The kinds of one
input type share one family (`TaskKind.inputs`); a kind whose inputs are new writes its own
family in its module and no other layer changes.

A family answers, for the layer that asks:
- the service (litlab.serving): how a JSON body (`json`) and uploaded files (`uploads`) become
  an answer, the warm-up requests (`warm_up`), whether requests share a run (`batchable`), the
  inputs an exported file must take (`expected_inputs`), what its metadata must hold
  (`check_metadata`, with the service's checks of each layout: it answers the input channels
  the out-of-distribution model is checked against) and the runner's zeros (`zeros`);
- export: whether the training images' background is stored for transparent uploads
  (`background`);
- compression and inspect: whether the inputs are one batched tensor, samples along dim 0
  (`batched_tensor`: Torch-Pruning's trace, int8 calibration batches, latency per batch size,
  a forward hook's output), and the training inputs a whole item is covered by (`patches`).

The methods import what they use (numpy, PIL); the service hands them its decoders
(`predictor.decoders`, `predictor.BadRequest`) and metadata checks, so this layer imports no
serving module and a kind's declarations stay light.
"""

FLOAT, INT64 = "tensor(float)", "tensor(int64)"


class InputFamily:
    """One batched float tensor, samples along dim 0, sent as JSON (`{"inputs": [...]}`)."""

    batched_tensor = True
    #: requests of several samples may share one ONNX Runtime run (micro-batching)
    batchable = True
    #: export stores the training images' background (transparent uploads are composited on it)
    background = False
    #: what the model takes instead of file uploads (the 415 answer names it)
    json_words = "inputs"

    @staticmethod
    def expected_inputs(layout: dict) -> list[tuple[str, str, list]]:
        """(name, ONNX type, shape from the layout) of each input the service feeds, in order."""
        return [("x", FLOAT, layout["x"]["shape"])]

    @staticmethod
    def check_metadata(inputs: dict, checks) -> int | None:
        checks.sample_inputs(inputs)
        return None

    @staticmethod
    def zeros(layout: dict, items: int) -> tuple:
        """The runner's warm-up input: `items` samples of zeros."""
        import numpy as np

        shape = [int(s) for s in layout["x"]["shape"][1:]]
        return (np.zeros((items, *shape), np.float32),)

    async def json(self, predictor, data: dict) -> dict:
        runner = predictor.runner
        x = predictor.decoders.tensor_batch(data, runner.layout["x"]["shape"], predictor.max_batch)
        return await predictor.answer_batch(x.astype("float32"))

    async def uploads(self, predictor, raw: list[bytes], names: list[str]):
        message = f"This model takes JSON ({self.json_words}), not file uploads."
        raise predictor.BadRequest(message, 415)

    async def warm_up(self, predictor) -> None:
        import numpy as np

        shape = [int(s) for s in predictor.runner.layout["x"]["shape"][1:]]
        await self.json(predictor, {"inputs": [np.zeros(shape, np.float32).tolist()]})

    @staticmethod
    def patches(datamodule, count: int, start: int = 0):
        """Training inputs that cover whole items (patch-sized crops), stacked; None: the
        datamodule's (inputs, labels) batches are the net's inputs."""
        return


class Samples(InputFamily):
    """Fixed-size samples of numbers (a table's rows, features): JSON only."""


class Images(InputFamily):
    """Images: PNG/JPEG uploads (or JSON images), decoded to the model's size and
    normalization, several to a request."""

    background = True

    @staticmethod
    def check_metadata(inputs: dict, checks) -> int:
        return checks.vision_inputs(inputs)

    async def uploads(self, predictor, raw: list[bytes], names: list[str]):
        predictor.decoders.count(len(raw), predictor.max_batch, "files")
        return await predictor.images(raw)

    async def warm_up(self, predictor) -> None:
        """A blank image of the model's size and one twice as wide with alpha (the resize and
        composite paths)."""
        import io

        from PIL import Image

        size = int(predictor.runner.layout["image_size"])
        mode = "L" if predictor.channels == 1 else "RGB"
        raw = []
        for img in (Image.new(mode, (size, size)), Image.new("RGBA", (size * 2, size))):
            buffer = io.BytesIO()
            img.save(buffer, "PNG")
            raw.append(buffer.getvalue())
        for r in raw:
            await predictor.images([r])
        await predictor.offload(predictor.decode_all, [predictor.header(raw[1])])


class Volumes(InputFamily):
    """3D volumes of the model's fixed size: one NIfTI upload a request (padded or cropped to
    that size, as training's were), or JSON volumes."""

    @staticmethod
    def check_metadata(inputs: dict, checks) -> int:
        return checks.volume_inputs(inputs, windows=False)

    async def uploads(self, predictor, raw: list[bytes], names: list[str]):
        predictor.decoders.count(len(raw), 1, "files")
        return await predictor.offload(self.volume, predictor, raw[0], names[0])

    def volume(self, predictor, raw: bytes, name: str):
        runner, (volume, _) = predictor.runner, self.nifti(predictor, raw, name)
        x = predictor.decoders.fit_volume(volume, runner.layout)[None]
        return runner.answer(runner.run(x), x)

    @staticmethod
    def nifti(predictor, raw: bytes, name: str):
        limit = predictor.settings.max_volume_voxels
        return predictor.decoders.nifti(raw, name or "upload", predictor.channels, limit)

    def warm_up_shape(self, layout: dict) -> list[int]:
        return [int(s) for s in layout["x"]["shape"][2:]]

    async def warm_up(self, predictor) -> None:
        """Random NIfTI volumes of the model's size, through the upload path, twice."""
        import gzip

        import nibabel as nib
        import numpy as np

        shape = self.warm_up_shape(predictor.runner.layout)
        channels = [predictor.channels] if predictor.channels > 1 else []
        data = np.random.default_rng(0).normal(size=(*shape, *channels)).astype(np.float32)
        raw = gzip.compress(nib.Nifti1Image(data, np.eye(4)).to_bytes(), compresslevel=1)
        for _ in range(2):
            await self.uploads(predictor, [raw], ["warm-up.nii.gz"])


class VolumeWindows(Volumes):
    """Whole volumes of any size, read by sliding windows of the model's patch size: one volume
    a request, answered by a label volume (NIfTI for an upload, nested lists for JSON)."""

    batchable = False

    @staticmethod
    def check_metadata(inputs: dict, checks) -> int:
        return checks.volume_inputs(inputs, windows=True)

    @staticmethod
    def zeros(layout: dict, items: int) -> tuple:
        """`items` patches of the sliding window."""
        import numpy as np

        channels = int(layout["x"]["shape"][1])
        return (np.zeros((items, channels, *layout["patch_size"]), np.float32),)

    async def json(self, predictor, data: dict) -> dict:
        import numpy as np

        decoders = predictor.decoders
        x = decoders.array(data.get("inputs"), "inputs", np.float32, 5)
        decoders.count(len(x), 1, "volumes")
        if x.shape[1] != predictor.channels or min(x.shape[2:]) < 1:
            raise predictor.BadRequest(
                f"The volume must have shape [1, {predictor.channels}, D, H, W].", 422
            )
        mask, fields = await predictor.offload(predictor.runner.segment, x[0])
        return {"mask": mask.tolist(), "classes": predictor.runner.names, **fields}

    def volume(self, predictor, raw: bytes, name: str):
        """(the label volume as NIfTI bytes, the answer's other fields)."""
        volume, affine = self.nifti(predictor, raw, name)
        mask, fields = predictor.runner.segment(volume)
        return predictor.decoders.nifti_bytes(mask, affine), fields

    def warm_up_shape(self, layout: dict) -> list[int]:
        shape = [int(s) for s in layout.get("patch_size") or layout["x"]["shape"][2:]]
        shape[0] *= 2  # several windows: the sliding window's batch shape too
        return shape

    @staticmethod
    def patches(datamodule, count: int, start: int = 0):
        import torch

        datamodule.setup("fit")
        items = datamodule.train_set
        return torch.stack([items[i % len(items)]["image"] for i in range(start, start + count)])


class Nodes(InputFamily):
    """One graph as JSON (node features `x`, `edge_index`), a class per node."""

    batched_tensor = False
    batchable = False
    json_words = "x, edge_index"
    #: the answer's `level`; graph batches add each node's graph id (`batch`)
    level = "node"

    def expected_inputs(self, layout: dict) -> list[tuple[str, str, list]]:
        out = [("x", FLOAT, layout["x"]["shape"]), ("edge_index", INT64, [2, "edges"])]
        return out + ([("batch", INT64, ["nodes"])] if self.level == "graph" else [])

    @staticmethod
    def check_metadata(inputs: dict, checks) -> None:
        checks.node_inputs(inputs)

    def zeros(self, layout: dict, items: int) -> tuple:
        """Two nodes (one edge), in `items` graphs where graphs are batched."""
        import numpy as np

        feats = layout["x"]["shape"][1]
        args = (np.zeros((2, feats), np.float32), np.zeros((2, 1), np.int64))
        return args + ((np.asarray([0, items - 1], np.int64),) if self.level == "graph" else ())

    async def json(self, predictor, data: dict) -> dict:
        runner, graph_level = predictor.runner, self.level == "graph"
        args = predictor.decoders.graph(
            data, predictor.channels, graph_level, max_nodes=predictor.max_batch * 10_000
        )
        out = runner.answer(await predictor.offload(runner.run, *args))
        return {"level": self.level, **out}

    async def warm_up(self, predictor) -> None:
        graph = {"x": [[0.0] * predictor.channels] * 3, "edge_index": [[0, 1], [1, 2]]}
        await self.json(predictor, graph)


class Graphs(Nodes):
    """Graphs as JSON, a class per graph (`batch`: each node's graph; one graph without it)."""

    level = "graph"
