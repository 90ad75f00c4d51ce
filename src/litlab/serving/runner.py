"""The model behind the service: one ONNX Runtime session (thread-safe, shared by requests),
optionally fed by a micro-batcher, and the task's output decoding (classes, probabilities)."""

import asyncio
from pathlib import Path

import numpy as np

from litlab import tasks


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


class Runner:
    def __init__(self, model_path, threads: int = 1):
        from litlab.export.latency import ort_session
        from litlab.export.onnx import read_metadata

        self.path = Path(model_path)
        self.session = ort_session(self.path, threads)
        self.meta = read_metadata(self.path)
        self.task = self.meta["task"]
        self.kind = tasks.get(self.task)  # what the kind's inputs and outputs are
        self.classes = self.meta["classes"]
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.layout = self.meta["inputs"]
        self.inline = False

    def run(self, *inputs: np.ndarray) -> np.ndarray:
        return self.session.run(None, dict(zip(self.input_names, inputs)))[0]

    def classify(self, logits: np.ndarray) -> dict:
        probs = softmax(logits.astype(np.float64))
        ids = probs.argmax(1)
        return {
            "predictions": [self.classes[i] for i in ids],
            "class_ids": ids.tolist(),
            "probabilities": np.round(probs, 6).tolist(),
            "classes": self.classes,
        }

    def segment(self, volume: np.ndarray) -> np.ndarray:
        """Label volume (D, H, W) of a (C, D, H, W) volume: sliding windows, as in training."""
        import torch
        from monai.inferers import sliding_window_inference

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
        return logits.argmax(1)[0].numpy().astype(np.uint8)

    #: runs faster than this (measured at warm-up) happen on the event loop: a thread
    #: hand-off costs more than the run itself for small models
    INLINE_S = 0.001

    def warm_up(self) -> None:
        """Inference on zeros of the input shape (ORT allocates and tunes on the first);
        decides whether runs stay on the event loop (`inline`)."""
        import time

        self._warm_up()
        start = time.perf_counter()
        self._warm_up()
        self.inline = time.perf_counter() - start < self.INLINE_S

    def _warm_up(self) -> None:
        if self.kind.inputs == "graph":
            feats = self.layout["x"]["shape"][1]
            args = [np.zeros((2, feats), np.float32), np.zeros((2, 1), np.int64)]
            if self.kind.serve_output == "graph_classes":
                args.append(np.zeros(2, np.int64))
            self.run(*args)
        elif self.kind.serve_output == "mask":
            self.run(np.zeros((1, 1, *self.layout["patch_size"]), np.float32))
        else:
            shape = [int(s) for s in self.layout["x"]["shape"][1:]]
            self.run(np.zeros((1, *shape), np.float32))


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
            except Exception as err:  # noqa: BLE001 (handed to each waiting request)
                for _, future in items:
                    future.set_exception(err)
                continue
            start = 0
            for x, future in items:
                if not future.cancelled():
                    future.set_result(out[start : start + len(x)])
                start += len(x)
