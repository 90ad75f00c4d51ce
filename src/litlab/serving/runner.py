"""The model behind the service: one ONNX Runtime session (thread-safe, shared by requests),
optionally fed by a micro-batcher, and the answer its kind gives with the out-of-distribution
scores. How a request is decoded is what the model's kind says (`Kind.json`, `Kind.uploads`);
the Predictor holds what the kinds use. Decoding runs off the event loop in a bounded thread
pool (`decode_threads`) so that /health and small requests are answered while large images
decode; tiny images (at most INLINE_PIXELS in all) decode in place, where a thread hand-off
would cost more."""

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from litlab import tasks
from litlab.config.after_training import ServeSettings
from litlab.errors import UserError, one_line
from litlab.export import ood
from litlab.serving import images
from litlab.tasks.checks import BadRequest

NOT_FINITE = (
    "The model's output is not finite for item {item} of the request (inputs far outside "
    "what it was trained on?); nothing was answered."
)
SCORE_NOT_FINITE = (
    "The out-of-distribution score is not finite for item {item} of the request (inputs far "
    "outside the training data); nothing was answered."
)


def check_finite(values, message: str) -> None:
    """A number that is not finite never reaches the JSON answer: the request gets a 422
    naming the first item (row) that has one."""
    if values is None or np.isfinite(values).all():
        return
    rows = np.isfinite(np.reshape(values, (len(values), -1))).all(1)
    raise BadRequest(message.format(item=int(np.argmin(rows)) + 1), 422)


class Runner:
    def __init__(self, model_path, threads: int = 1):
        """Opens the file, checks its metadata (litlab.serving.metadata) and runs it once on
        zeros: a file whose outputs disagree with its metadata stops here, before listening."""
        from litlab.serving import metadata
        from litlab.threads import ort_session

        self.path = Path(model_path)
        try:
            self.session = ort_session(self.path, threads)
        except Exception as err:  # noqa: BLE001 (ORT raises its own types for bad files)
            raise UserError(
                f"{self.path} is not an ONNX model ONNX Runtime can load: {one_line(err, limit=150)}"
            ) from None
        model = metadata.load_model(self.path)
        self.meta = metadata.read_checked(self.path, self.session, model)
        self.kind = tasks.get(self.meta["kind"])  # a kind litlab.tasks declares: checked there
        self.names = self.meta[self.kind.names_key]
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.layout = self.meta["inputs"]
        metadata.check_signature(self.path, model, self.session, self.kind, self.layout)
        del model
        self.ood = self.meta.get("ood")
        self.ood_model = self.ood.get("model") if self.ood else None
        self.ood_score = ood.scorer(self.ood) if self.ood else None
        self.inline = False
        self.warm_up()

    def run(self, *inputs: np.ndarray) -> np.ndarray:
        """The model's first output. An input it cannot run on (checked at start on zeros of
        one and two items, so this depends on the input) is the request's 422, not a 500."""
        try:
            return self.session.run(None, dict(zip(self.input_names, inputs)))[0]
        except Exception as err:  # ONNX Runtime raises its own error types
            raise BadRequest(
                f"The model cannot run on this input (ONNX Runtime: {type(err).__name__}).", 422
            ) from err

    def ood_scores(self, probs: np.ndarray, x: np.ndarray | None = None) -> np.ndarray | None:
        """The out-of-distribution score per item (None for exports without one)."""
        if self.ood is None:
            return None
        with np.errstate(all="ignore"):  # an overflow shows as inf: told by `check_finite`
            return self.ood_score(probs, x if self.ood_model is not None else None)

    def ood_fields(self, probs: np.ndarray, x=None, scores=None) -> dict:
        """`ood_scores` and `out_of_distribution` per item (absent for exports without them):
        the scores given (computed for a whole micro-batch), or computed here from the prepared
        outputs and the inputs `x`."""
        scores = self.ood_scores(probs, x) if scores is None else scores
        if scores is None:
            return {}
        check_finite(scores, SCORE_NOT_FINITE)
        return {
            "ood_scores": np.round(scores, 4).tolist(),
            "out_of_distribution": (scores > self.ood["threshold"]).tolist(),
        }

    def answer(self, outputs: np.ndarray | None, x=None, scores=None, prepared=None) -> dict:
        """The answer of the kind (classes and probabilities, values) and its OOD fields.
        `prepared`: outputs the micro-batcher prepared."""
        prepared = self.kind.prepare(outputs) if prepared is None else prepared
        check_finite(prepared, NOT_FINITE)
        return {**self.kind.answer(self.names, prepared), **self.ood_fields(prepared, x, scores)}

    def segment(self, volume: np.ndarray) -> tuple[np.ndarray, dict]:
        """Label volume (D, H, W) of a (C, D, H, W) volume (sliding windows, as in training),
        and its out-of-distribution fields."""
        import torch
        from monai.inferers import sliding_window_inference

        from litlab.tasks.kind import class_map

        window = self.layout["sliding_window"]
        with torch.inference_mode():
            logits = sliding_window_inference(
                torch.from_numpy(volume[None]),
                tuple(self.layout["patch_size"]),
                4,
                lambda x: torch.from_numpy(self.run(x.numpy())),
                overlap=window["overlap"],
                mode=window["mode"],
            )
        check_finite(logits.numpy(), NOT_FINITE)
        mask = class_map(logits)[0].numpy().astype(np.uint8)
        return mask, self.ood_fields(logits.softmax(1).numpy())

    #: runs faster than this (measured at warm-up) happen on the event loop: a thread
    #: hand-off costs more than the run itself for small models
    INLINE_S = 0.001

    def warm_up(self) -> None:
        """Inference on zeros of the input shape (ORT allocates and tunes on the first);
        decides whether runs stay on the event loop (`inline`); checks the output width, and
        that two items get two answers (the service batches them)."""
        import time

        try:
            out, two = self._warm_up(), self._warm_up(items=2)
        except BadRequest as err:  # ORT's error (its cause): a graph that cannot run
            raise UserError(
                f"{self.path.name}: the model fails on inputs of the shape its metadata gives: "
                f"{one_line(err.__cause__ or err, limit=150)}; re-export the checkpoint with "
                "src/export.py"
            ) from None
        if len(two) != 2:
            raise UserError(
                f"{self.path.name}: the model answers {len(two)} row{'s' * (len(two) != 1)} "
                "for 2 items (a fixed batch size?); re-export the checkpoint with src/export.py"
            )
        if not np.isfinite(out).all():
            raise UserError(
                f"{self.path.name}: the model's output on an all-zero input is not finite (NaN "
                "or infinite weights, or an overflow); re-export the checkpoint with src/export.py"
            )
        width, key = out.shape[1] if out.ndim > 1 else None, self.kind.names_key
        if width != len(self.names):
            raise UserError(
                f"{self.path.name}: the model outputs {width} {key} but its metadata names "
                f"{len(self.names)}; re-export the checkpoint with src/export.py"
            )
        start = time.perf_counter()
        self._warm_up()
        self.inline = time.perf_counter() - start < self.INLINE_S

    def _warm_up(self, items: int = 1) -> np.ndarray:
        """The answer to zeros: `items` samples (or patches, or graphs) of the kind's input
        family."""
        return self.run(*self.kind.zeros(self.layout, items))


class MicroBatcher:
    """Requests that arrive within `max_wait_ms` of each other share one session run (up to
    `max_batch` samples): fewer, larger runs, at the price of the wait."""

    def __init__(self, runner: Runner, max_batch: int, max_wait_ms: float):
        self.runner, self.max_batch, self.max_wait = runner, max_batch, max_wait_ms / 1e3
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def __call__(self, x: np.ndarray) -> np.ndarray:
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((x, future))
        return await future

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            items = [await self.queue.get()]
            size, deadline = len(items[0][0]), loop.time() + self.max_wait
            while size < self.max_batch and (left := deadline - loop.time()) > 0:
                try:
                    items.append(await asyncio.wait_for(self.queue.get(), left))
                except TimeoutError:
                    break
                size += len(items[-1][0])
            batch = np.concatenate([x for x, _ in items])
            try:
                out = (
                    self.runner.run(batch)
                    if self.runner.inline
                    else await loop.run_in_executor(None, self.runner.run, batch)
                )
                # prepared outputs (probabilities) and OOD scores of the whole batch: numpy's
                # per-call cost once
                probs = self.runner.kind.prepare(out)
                scores = self.runner.ood_scores(probs, batch)
            except Exception as err:  # noqa: BLE001 (handed to each waiting request: the
                # loop lives on, no request waits for a batch that failed)
                for _, future in items:
                    if not future.cancelled():
                        future.set_exception(err)
                continue
            bounds = np.cumsum([len(x) for x, _ in items])[:-1]  # each request's rows
            each = np.split(scores, bounds) if scores is not None else [None] * len(items)
            for (_, future), part, part_scores in zip(items, np.split(probs, bounds), each):
                if not future.cancelled():
                    future.set_result((part, part_scores))


# ------------------------------------------------------------- predictor
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
        parse = functools.partial(images.parse_json, body, s.max_json_depth)
        data = parse() if len(body) <= 64 << 10 else await self.offload(parse)  # small: in place
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
