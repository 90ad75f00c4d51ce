"""Pure ASGI layers in front of the app: request metrics (every response, the 413s of the body
limit too; cheaper than Starlette's per-request middleware), a body size limit (413 before
the body is read (Content-Length), or as soon as a streamed body passes the limit) and a
deadline per request (503 with Retry-After when a request takes longer than max_request_s)."""

import asyncio
import json
import time


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
            if not started:
                await _send_error(
                    send,
                    503,
                    f"The request took longer than {self.seconds:g} s (serve setting "
                    "max_request_s); retry later or send less.",
                    self.retry_after,
                )
        except asyncio.CancelledError:  # only the server cancels a request's task
            if started:
                raise
            drain = f" within drain_timeout_s={self.drain_s:g} s" if self.drain_s else ""
            await _send_error(
                send,
                503,
                f"The server stopped before this request was answered{drain}; retry it "
                "when the service is back.",
                self.retry_after,
            )


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
