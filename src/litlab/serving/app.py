"""The FastAPI app: /health, /metadata, /predict, /metrics (prometheus-client), /docs.

Every bad request gets a 4xx and one JSON sentence, {"error": ...}; no request can produce a
500 (tests/test_serve_hostile.py fuzzes them). Pure ASGI layers in front of the app (cheaper
than Starlette's per-request middleware): request metrics (every response, the 413s of the
body limit too), a body size limit (413 before the body is read (Content-Length), or as soon
as a streamed body passes the limit) and a deadline per request (503 with Retry-After when a
request takes longer than max_request_s)."""

import asyncio
import gc
import json
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
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
from starlette.requests import ClientDisconnect

from litlab.config.after_training import ServeSettings
from litlab.serving.metadata import for_clients
from litlab.serving.runner import Predictor, Runner
from litlab.tasks.checks import BadRequest

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
                "description": "PNG/JPEG/TIFF/GIF/WebP images, one frame each (vision) "
                "or one NIfTI volume (3D), as field(s) named `file`",
            },
        }
    }
}


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def answer(content: dict, headers: dict | None = None) -> JSONResponse:
    """A JSON answer; a number that is not finite (which JSON cannot carry, and which the
    runner refuses first) is the 422 of a non-finite output, never an encoder's 500."""
    try:
        return JSONResponse(content, headers=headers)
    except ValueError:  # "Out of range float values are not JSON compliant"
        raise BadRequest(
            "The model's output is not finite (NaN or infinite numbers have no JSON form).",
            422,
        ) from None


def create_app(model_path: str | Path, settings: ServeSettings | None = None, **overrides):
    """The ASGI app for one ONNX file (its metadata checked, the model run once before this
    returns); `overrides` are ServeSettings fields (e.g. max_batch=8)."""
    settings = (settings or ServeSettings()).model_copy(update=overrides)
    settings = ServeSettings(**settings.model_dump())  # bounds checked on the overrides too
    state = {"ready": False}
    runner = Runner(model_path, settings.threads)
    predictor = Predictor(runner, settings)
    registry, requests, latency = _metrics()

    @asynccontextmanager
    async def lifespan(app):
        await predictor.start()  # warm-up: /health says ready only after it
        gc.freeze()  # the startup's objects (modules, app, session) leave the GC's scans
        state["ready"] = True
        yield
        state["ready"] = False
        await predictor.stop()

    app = FastAPI(
        title="litlab inference",
        lifespan=lifespan,
        description=f"{runner.kind.name} model {runner.path.name} on ONNX Runtime",
    )
    _answer_errors(app)
    _add_routes(app, runner, predictor, settings, state, registry)
    paths = {"/health", "/metadata", "/metrics", "/predict"}
    body_limit = BodyLimit(app, settings.max_body_bytes)
    guarded = Deadline(
        body_limit, settings.max_request_s, settings.retry_after_s, settings.drain_timeout_s
    )
    return Metrics(guarded, requests, latency, paths)


def _metrics() -> tuple[CollectorRegistry, Counter, Histogram]:
    """The app's own prometheus registry (several apps in one process count apart)."""
    registry = CollectorRegistry()
    requests = Counter("litlab_requests", "HTTP requests", ["path", "status"], registry=registry)
    latency = Histogram(
        "litlab_request_seconds",
        "request latency",
        ["path"],
        registry=registry,
        buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
    )
    return registry, requests, latency


def _answer_errors(app: FastAPI) -> None:
    """Every error a request meets is one JSON sentence with its 4xx; a bug is a 500 that
    names its type, and the worker lives on."""

    @app.exception_handler(BadRequest)
    async def bad_request(request, err: BadRequest):
        return error(err.status, str(err))

    @app.exception_handler(HTTPException)
    async def http_error(request, err: HTTPException):
        return error(err.status_code, str(err.detail).rstrip(".") + ".")

    @app.exception_handler(RequestValidationError)
    async def invalid(request, err):
        return error(422, "The request does not match the API (see /docs).")

    @app.exception_handler(ClientDisconnect)
    async def gone(request, err):  # nobody reads this answer; counted as the client's error
        return error(400, "The client closed the connection before the body was received.")

    @app.exception_handler(Exception)
    async def unexpected(request, err):
        return error(500, f"Internal error ({type(err).__name__}).")


def _add_routes(app: FastAPI, runner, predictor, settings, state: dict, registry) -> None:
    @app.get("/health")
    async def health():
        if not state["ready"]:
            return error(503, "The model is still loading.")
        return {"status": "ready", "model": runner.path.name}

    shown = for_clients(runner.meta)  # checked finite when the file was opened

    @app.get("/metadata")
    async def metadata():
        return answer(shown)

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/predict", openapi_extra=PREDICT_BODY)
    async def predict(request: Request):
        request_id = uuid.uuid4().hex
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "application/json":
            out = await predictor.json(await request.body())
        elif kind == "multipart/form-data":
            out = await _predict_uploads(request, predictor, settings.max_batch)
        else:
            raise BadRequest(
                f"Unsupported content type {kind[:60] or 'none'!r}; send "
                "application/json or multipart/form-data.",
                415,
            )
        if "image/png" in request.headers.get("accept", "") and not isinstance(out, tuple):
            out = (_png(predictor.kind, out), out)
        return _prediction(out, request_id)


def _png(kind, out: dict) -> bytes:
    """The answer as the PNG the client asked for (a label map), or why not."""
    try:
        png = kind.png(out)
    except ValueError as err:
        raise BadRequest(str(err), 422) from None
    if png is None:
        raise BadRequest("This model answers JSON only; drop the Accept: image/png header.", 406)
    return png


def _prediction(out, request_id: str) -> Response:
    """The answer to /predict: JSON, or a segmentation mask as a file (a NIfTI volume, or a
    PNG label map the client asked for with `Accept: image/png`) whose OOD verdict travels in
    headers."""
    headers = {"X-Request-ID": request_id}
    if not isinstance(out, tuple):
        return answer({"request_id": request_id, **out}, headers)
    body, fields = out  # fields: the PNG's answer (with its masks), or the volume's OOD fields
    if "ood_scores" in fields:
        headers["X-OOD-Score"] = str(fields["ood_scores"][0])
        headers["X-Out-Of-Distribution"] = str(fields["out_of_distribution"][0]).lower()
    name, media = (
        ("mask.png", "image/png") if "masks" in fields else ("mask.nii.gz", "application/gzip")
    )
    headers["Content-Disposition"] = f'attachment; filename="{name}"'
    return Response(body, media_type=media, headers=headers)


async def _predict_uploads(request: Request, predictor, limit: int):
    """The uploaded files of a multipart body (at most `limit` files or fields), predicted."""
    try:
        form = await request.form(max_files=limit, max_fields=limit)
    except ClientDisconnect:
        raise
    except Exception as err:  # noqa: BLE001 (python-multipart's parse errors, starlette's limits)
        if isinstance(err, HTTPException) and "Too many" in str(err.detail):  # files, fields
            raise BadRequest(
                f"The request holds more than {limit} files or fields; the limit is {limit}.",
                413,
            ) from None
        raise BadRequest("The multipart body cannot be parsed.") from None
    try:
        files = [v for _, v in form.multi_items() if hasattr(v, "read")]
        raw = [await f.read() for f in files]
        return await predictor.uploads(raw, [f.filename or "upload" for f in files])
    finally:
        await form.close()


# ---------------------------------------------------------------- limits
async def _send_error(send, status: int, message: str, retry_after: int | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Deadline:
    """ASGI middleware: a request still unanswered after `seconds` gets a 503 (its work is
    cancelled; a decode already running in the pool finishes there, bounded by the pool).
    So does one that a stopping server cancels when its drain (`drain_s`) runs out: uvicorn
    would answer it with a plain-text 500, as if the request had found a bug."""

    def __init__(self, app, seconds: float, retry_after: int, drain_s: float | None = None):
        self.app, self.seconds, self.retry_after = app, seconds, retry_after
        self.drain_s = drain_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def watch(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            async with asyncio.timeout(self.seconds):
                return await self.app(scope, receive, watch)
        except TimeoutError:
            message = (
                f"The request took longer than {self.seconds:g} s (serve setting "
                "max_request_s); retry later or send less."
            )
        except asyncio.CancelledError:  # only the server cancels a request's task
            if started:
                raise
            drain = f" within drain_timeout_s={self.drain_s:g} s" if self.drain_s else ""
            message = (
                f"The server stopped before this request was answered{drain}; retry it "
                "when the service is back."
            )
        if not started:
            await _send_error(send, 503, message, self.retry_after)


class BodyLimit:
    """ASGI middleware: at most `max_bytes` of request body."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        too_big = f"The request body is larger than the limit of {self.max_bytes} bytes."
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return await _send_error(send, 400, "The Content-Length header is not a number.")
            if int(length) > self.max_bytes:
                return await _send_error(send, 413, too_big)
            return await self.app(scope, receive, send)
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, size, more = [], 0, True  # streamed (chunked): read up to the limit first
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                return await _send_error(send, 413, too_big)
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


class Metrics:
    """Count each response by path and status and time it (prometheus-client metrics)."""

    def __init__(self, app, requests, latency, paths: set[str]):
        self.app, self.requests, self.latency, self.paths = app, requests, latency, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), [500]

        async def observe(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            path = scope["path"] if scope["path"] in self.paths else "other"
            self.requests.labels(path, str(status[0])).inc()
            self.latency.labels(path).observe(time.perf_counter() - start)
