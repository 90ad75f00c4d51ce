"""Request bodies -> predictions for one model. Decoding and preprocessing run off the event
loop in a bounded thread pool (`decode_threads`), so /health and small requests are answered
while large images decode; tiny images (at most INLINE_PIXELS in all) decode in place, where
a thread hand-off would cost more than the decode. Image sizes are checked from the headers
(per image and per request) before any pixel is decoded.

How a request is decoded is what the model's kind says (`Kind.json`, `Kind.uploads`: JSON
samples, image or NIfTI uploads, graphs); this class holds what the kinds use: the decode
pool, image and NIfTI decoding, the limits and the micro-batcher."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from litlab.config.after_training import ServeSettings
from litlab.serving import images
from litlab.serving.runner import MicroBatcher, Runner
from litlab.tasks.checks import BadRequest

INLINE_PIXELS = 64 * 64


class Predictor:
    def __init__(self, runner: Runner, settings: ServeSettings):
        self.runner, self.settings, self.kind = runner, settings, runner.kind
        self.max_batch = settings.max_batch
        self.batcher = (
            MicroBatcher(runner, settings.max_batch, settings.max_wait_ms)
            if settings.batching and self.kind.batchable
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
            images.parse_json(body, s.max_json_depth)
            if small
            else await self.offload(images.parse_json, body, s.max_json_depth)
        )
        return await self.predict_json(data)

    async def predict_json(self, data: dict) -> dict:
        return await self.kind.json(self, data)

    async def uploads(self, raw: list[bytes], names: list[str]):
        """Uploaded files' bytes -> the response body (a dict), or (mask bytes, fields)."""
        return await self.kind.uploads(self, raw, names)

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
        x, sizes = decode(heads) if pixels <= INLINE_PIXELS else await self.offload(decode, heads)
        answer = await self.answer_batch(x)
        return self.kind.at_image_sizes(answer, sizes, self.runner.layout.get("fit"))

    def nifti(self, raw: bytes, name: str):
        """A NIfTI upload as (volume z-scored as in training, affine), size-checked first."""
        from litlab.domains.medical3d.nifti import read_upload

        return read_upload(raw, name or "upload", self.channels, self.settings.max_volume_voxels)

    @staticmethod
    def nifti_bytes(mask: np.ndarray, affine: np.ndarray) -> bytes:
        from litlab.domains.medical3d.nifti import nifti_bytes

        return nifti_bytes(mask, affine)

    @staticmethod
    def header(raw: bytes):
        """An image's header, read without the request limits (the service's own inputs)."""
        return images.check_header(raw, 1 << 30)

    def decode_all(self, heads: list) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The images as the model's batch, and each one's size as the upload is shown."""
        layout = self.runner.layout
        size = int(layout["image_size"])
        out, sizes = [], []
        for head in heads:
            head, shown = images.prepare(head, size)
            x = images.fast_path(head, layout)
            out.append(x if x is not None else images.decode(head, layout))
            sizes.append(shown)
        return np.stack(out), sizes

    async def warm_up(self) -> None:
        """One request of each kind the model will see, through the whole path (decoding,
        sliding windows, imports), so that the first client's request is as fast as the next.
        A warm-up input the model cannot answer (a 422: its output is not finite for a blank
        image) still warmed the path: the service starts, and answers that input so too."""
        try:
            await self.kind.warm_up(self)
        except BadRequest:
            pass


def _background() -> None:
    """Decode threads yield the CPU to the event loop's thread (Linux: nice is per thread),
    so /health and small requests are answered first on a busy machine."""
    import os
    import threading

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not permitted: same priority then
        pass
