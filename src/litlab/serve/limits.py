"""A body size limit in front of the app: 413 before the body is read (Content-Length), or as
soon as a streamed body passes the limit, so a huge upload never reaches memory."""
import json


async def _send_error(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


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
