"""The FastAPI app: /health, /metadata, /predict, /metrics (prometheus-client), /docs.

Every bad request gets a 4xx and one JSON sentence, {"error": ...}; the body size limit is
enforced before the body is read (`BodyLimit`)."""

import gc
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.exceptions import HTTPException

from litlab.serving import inputs
from litlab.serving.inputs import BadRequest
from litlab.serving.limits import BodyLimit, Metrics
from litlab.serving.runner import MicroBatcher, Runner

PREDICT_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {"type": "object", "example": {"inputs": [[[[0.0]]]]}},
                "description": "{'inputs': [samples in the model's input shape]}, or "
                "graphs: {'x': [[...]], 'edge_index': [[...], [...]], "
                "'batch': [...]}",
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {"file": {"type": "string", "format": "binary"}},
                },
                "description": "PNG/JPEG images (vision) "
                "or one NIfTI volume (3D), as field(s) named `file`",
            },
        }
    }
}


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(
    model_path: str | Path,
    max_batch: int = 64,
    batching: bool = True,
    max_wait_ms: float = 1.0,
    threads: int = 1,
    max_body_bytes: int = 8 << 20,
):
    """The ASGI app: metrics and body limit (litlab.serving.limits) around the FastAPI app."""
    state = {"ready": False}
    runner = Runner(model_path, threads)
    batcher = (
        MicroBatcher(runner, max_batch, max_wait_ms)
        if batching and runner.kind.serve_batchable
        else None
    )
    registry = CollectorRegistry()
    requests = Counter("litlab_requests", "HTTP requests", ["path", "status"], registry=registry)
    latency = Histogram(
        "litlab_request_seconds",
        "request latency",
        ["path"],
        registry=registry,
        buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
    )

    @asynccontextmanager
    async def lifespan(app):
        runner.warm_up()
        if batcher is not None:
            batcher.start()
        gc.freeze()  # the startup's objects (modules, app, session) leave the GC's scans
        state["ready"] = True
        yield
        state["ready"] = False
        if batcher is not None:
            await batcher.stop()

    app = FastAPI(
        title="litlab inference",
        lifespan=lifespan,
        description=f"{runner.task} model {runner.path.name} on ONNX Runtime",
    )

    @app.exception_handler(BadRequest)
    async def bad_request(request, err: BadRequest):
        return error(err.status, str(err))

    @app.exception_handler(HTTPException)
    async def http_error(request, err: HTTPException):
        return error(err.status_code, str(err.detail).rstrip(".") + ".")

    @app.exception_handler(RequestValidationError)
    async def invalid(request, err):
        return error(422, "The request does not match the API (see /docs).")

    @app.exception_handler(Exception)
    async def unexpected(request, err):  # a bug, not bad input: one line, the worker lives on
        return error(500, f"Internal error ({type(err).__name__}).")

    @app.get("/health")
    async def health():
        if not state["ready"]:
            return error(503, "The model is still loading.")
        return {"status": "ready", "model": runner.path.name}

    @app.get("/metadata")
    async def metadata():
        return runner.meta

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/predict", openapi_extra=PREDICT_BODY)
    async def predict(request: Request):
        request_id = uuid.uuid4().hex
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "application/json":
            data = inputs.parse_json(await request.body())
            out = await predict_json(data)
        elif kind == "multipart/form-data":
            out = await predict_files(request)
        else:
            raise BadRequest(
                f"Unsupported content type {kind or 'none'!r}; send "
                "application/json or multipart/form-data.",
                415,
            )
        if isinstance(out, Response):
            out.headers["X-Request-ID"] = request_id
            return out
        return JSONResponse({"request_id": request_id, **out}, headers={"X-Request-ID": request_id})

    async def classify_batch(x: np.ndarray) -> dict:
        if batcher is not None:
            logits = await batcher(x)
        else:
            logits = runner.run(x) if runner.inline else await run_in_threadpool(runner.run, x)
        return runner.classify(logits)

    async def predict_json(data: dict) -> dict:
        kind = runner.kind
        if kind.inputs == "graph":
            graph_level = kind.serve_output == "graph_classes"
            args = inputs.graph(
                data, runner.layout["x"]["shape"][1], graph_level, max_nodes=max_batch * 10_000
            )
            out = runner.classify(await run_in_threadpool(runner.run, *args))
            return {"level": "graph" if graph_level else "node", **out}
        if kind.serve_output == "mask":
            x = inputs.array(data.get("inputs"), "inputs", np.float32, 5)
            inputs.count(len(x), 1, "volumes")
            if x.shape[1] != channels or min(x.shape[2:]) < 1:
                raise BadRequest(f"The volume must have shape [1, {channels}, D, H, W].", 422)
            mask = await run_in_threadpool(runner.segment, x[0])
            return {"mask": mask.tolist(), "classes": runner.classes}
        return await classify_batch(
            inputs.tensor_batch(data, runner.layout["x"]["shape"], max_batch)
        )

    async def predict_files(request: Request):
        try:
            form = await request.form(max_files=max_batch, max_fields=max_batch)
        except HTTPException as err:  # starlette's own limits (files, fields)
            if "Too many" in str(err.detail):
                raise BadRequest(
                    f"The request holds more than {max_batch} files or fields; "
                    f"the limit is {max_batch}.",
                    413,
                ) from None
            raise BadRequest("The multipart body cannot be parsed.") from None
        except Exception:  # noqa: BLE001 (python-multipart's parse errors)
            raise BadRequest("The multipart body cannot be parsed.") from None
        files = [v for _, v in form.multi_items() if hasattr(v, "read")]
        inputs.count(len(files), max_batch if runner.kind.serve_batchable else 1, "files")
        raw = [await f.read() for f in files]
        if runner.kind.serve_files == "image":
            x = np.stack([inputs.image(r, runner.layout) for r in raw])
            return await classify_batch(x)
        if runner.kind.serve_files == "volume":
            volume, affine = inputs.nifti(raw[0], files[0].filename or "upload", channels)
            if runner.kind.serve_output == "classes":
                return await classify_batch(fit_volume(volume, runner.layout)[None])
            mask = await run_in_threadpool(runner.segment, volume)
            return Response(
                nifti_bytes(mask, affine),
                media_type="application/gzip",
                headers={"Content-Disposition": 'attachment; filename="mask.nii.gz"'},
            )
        raise BadRequest("This model takes JSON requests, not file uploads.", 415)

    channels = int(runner.layout["x"]["shape"][1])
    paths = {"/health", "/metadata", "/metrics", "/predict"}
    return Metrics(BodyLimit(app, max_body_bytes), requests, latency, paths)


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
