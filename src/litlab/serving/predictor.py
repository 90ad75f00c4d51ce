"""Request bodies -> predictions for one model. Decoding and preprocessing run off the event
loop in a bounded thread pool (`decode_threads`), so /health and small requests are answered
while large images decode; tiny images (at most INLINE_PIXELS in all) decode in place, where
a thread hand-off would cost more than the decode. Image sizes are checked from the headers
(per image and per request) before any pixel is decoded.

How a request is decoded is what the model's task kind declares: graph inputs take JSON nodes
and edges (`TaskKind.inputs`), a mask output takes one volume (`serve_output`), uploads are
images or NIfTI volumes (`serve_files`), and any other kind takes JSON samples."""

import asyncio
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from litlab.serving import images, inputs
from litlab.serving.inputs import BadRequest
from litlab.serving.runner import MicroBatcher, Runner
from litlab.serving.settings import ServeSettings

INLINE_PIXELS = 64 * 64
#: what a model that decodes no uploads takes instead, by `TaskKind.inputs`
JSON_INPUTS = {"graph": "x, edge_index", "tensor": "inputs"}


class Predictor:
    def __init__(self, runner: Runner, settings: ServeSettings):
        self.runner, self.settings, self.kind = runner, settings, runner.kind
        self.max_batch = settings.max_batch
        self.batcher = (
            MicroBatcher(runner, settings.max_batch, settings.max_wait_ms)
            if settings.batching and self.kind.serve_batchable
            else None
        )
        self.pool = ThreadPoolExecutor(
            settings.decode_threads, thread_name_prefix="decode", initializer=_background
        )
        self.channels = int(runner.layout["x"]["shape"][1])

    async def offload(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def start(self) -> None:
        if self.batcher is not None:
            self.batcher.start()
        await self.warm_up()

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def answer_batch(self, x: np.ndarray) -> dict:
        runner = self.runner
        if self.batcher is not None:
            prepared, scores = await self.batcher(x)
            return runner.answer(None, scores=scores, prepared=prepared)
        outputs = runner.run(x) if runner.inline else await self.offload(runner.run, x)
        return runner.answer(outputs, x)

    async def json(self, body: bytes) -> dict:
        s = self.settings
        if len(body) > s.max_json_bytes:
            raise BadRequest(
                f"The JSON body is {len(body):,} bytes; the limit is {s.max_json_bytes:,} "
                "(serve setting max_json_bytes; send images or volumes as files).",
                413,
            )
        small = len(body) <= 64 << 10
        data = (
            inputs.parse_json(body, s.max_json_depth)
            if small
            else await self.offload(inputs.parse_json, body, s.max_json_depth)
        )
        return await self.predict_json(data)

    async def predict_json(self, data: dict) -> dict:
        runner, kind = self.runner, self.kind
        if kind.inputs == "graph":
            graph_level = kind.serve_output == "graph_classes"
            args = inputs.graph(data, self.channels, graph_level, max_nodes=self.max_batch * 10_000)
            out = runner.answer(await self.offload(runner.run, *args))
            return {"level": "graph" if graph_level else "node", **out}
        if kind.serve_output == "mask":
            x = inputs.array(data.get("inputs"), "inputs", np.float32, 5)
            inputs.count(len(x), 1, "volumes")
            if x.shape[1] != self.channels or min(x.shape[2:]) < 1:
                raise BadRequest(f"The volume must have shape [1, {self.channels}, D, H, W].", 422)
            mask, fields = await self.offload(runner.segment, x[0])
            return {"mask": mask.tolist(), "classes": runner.classes, **fields}
        x = inputs.tensor_batch(data, runner.layout["x"]["shape"], self.max_batch)
        return await self.answer_batch(x.astype(np.float32))

    async def uploads(self, raw: list[bytes], names: list[str]):
        """Uploaded files' bytes -> the response body (a dict), or (mask bytes, fields)."""
        kind = self.kind
        inputs.count(len(raw), self.max_batch if kind.serve_batchable else 1, "files")
        if kind.serve_files == "image":
            return await self.images(raw)
        if kind.serve_files == "volume":
            return await self.offload(self.volume, raw[0], names[0])
        raise BadRequest(
            f"This model takes JSON ({JSON_INPUTS[kind.inputs]}), not file uploads.", 415
        )

    async def images(self, raw: list[bytes]) -> dict:
        s = self.settings
        heads = [images.check_header(r, s.max_image_pixels) for r in raw]
        pixels = sum(h.size[0] * h.size[1] for h in heads)
        if pixels > s.max_request_pixels:
            raise BadRequest(
                f"The request's images hold {pixels:,} pixels; the limit is "
                f"{s.max_request_pixels:,} per request (serve setting max_request_pixels).",
                413,
            )
        decode = self.decode_all
        x = decode(heads) if pixels <= INLINE_PIXELS else await self.offload(decode, heads)
        return await self.answer_batch(x)

    def decode_all(self, heads: list) -> np.ndarray:
        layout = self.runner.layout
        size = int(layout["image_size"])
        out = []
        for head in heads:
            head = images.prepare(head, size)
            x = images.fast_path(head, layout)
            out.append(x if x is not None else images.decode(head, layout))
        return np.stack(out)

    def volume(self, raw: bytes, name: str):
        """One NIfTI upload: a classification dict, or (mask as NIfTI bytes, fields)."""
        runner = self.runner
        limit = self.settings.max_volume_voxels
        volume, affine = inputs.nifti(raw, name or "upload", self.channels, limit)
        if self.kind.serve_output == "mask":
            mask, fields = runner.segment(volume)
            return nifti_bytes(mask, affine), fields
        x = fit_volume(volume, runner.layout)[None]
        return runner.answer(runner.run(x), x)

    async def warm_up(self) -> None:
        """One request of each kind the model will see, through the whole path (decoding,
        sliding windows, imports), so that the first client's request is as fast as the next.
        A warm-up input the model cannot answer (a 422: its output is not finite for a blank
        image) still warmed the path: the service starts, and answers that input so too."""
        try:
            await self._warm_up()
        except BadRequest:
            pass

    async def _warm_up(self) -> None:
        runner, kind = self.runner, self.kind
        if kind.serve_files == "image":
            from PIL import Image

            size, mode = int(runner.layout["image_size"]), "L" if self.channels == 1 else "RGB"
            raw = []
            for img in (Image.new(mode, (size, size)), Image.new("RGBA", (size * 2, size))):
                buf = io.BytesIO()
                img.save(buf, "PNG")
                raw.append(buf.getvalue())
            for r in raw:
                await self.images([r])
            await self.offload(self.decode_all, [images.check_header(raw[1], 1 << 30)])
        elif kind.serve_files == "volume":
            import gzip

            import nibabel as nib

            shape = runner.layout.get("patch_size") or runner.layout["x"]["shape"][2:]
            shape = [int(s) for s in shape]
            if kind.serve_output == "mask":
                shape[0] *= 2  # several windows: the sliding window's batch shape too
            channels = [self.channels] if self.channels > 1 else []
            data = np.random.default_rng(0).normal(size=(*shape, *channels)).astype(np.float32)
            raw = gzip.compress(nib.Nifti1Image(data, np.eye(4)).to_bytes(), compresslevel=1)
            for _ in range(2):
                await self.uploads([raw], ["warm-up.nii.gz"])
        elif kind.inputs == "graph":
            feats = self.channels
            graph = {"x": [[0.0] * feats] * 3, "edge_index": [[0, 1], [1, 2]]}
            await self.predict_json(graph)
        else:
            sample = np.zeros([int(s) for s in runner.layout["x"]["shape"][1:]], np.float32)
            await self.predict_json({"inputs": [sample.tolist()]})


def _background() -> None:
    """Decode threads yield the CPU to the event loop's thread (Linux: nice is per thread),
    so /health and small requests are answered first on a busy machine."""
    import os
    import threading

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not permitted: same priority then
        pass


def fit_volume(volume: np.ndarray, layout: dict) -> np.ndarray:
    """Pad or crop to the classifier's fixed size, as its training data was."""
    from monai.transforms import ResizeWithPadOrCrop

    size = [int(s) for s in layout["x"]["shape"][2:]]
    return np.asarray(ResizeWithPadOrCrop(size)(volume), dtype=np.float32)


def nifti_bytes(mask: np.ndarray, affine: np.ndarray) -> bytes:
    import gzip

    import nibabel as nib

    image = nib.Nifti1Image(mask.astype(np.uint8), affine)
    image.set_data_dtype(np.uint8)
    return gzip.compress(image.to_bytes(), compresslevel=1)
