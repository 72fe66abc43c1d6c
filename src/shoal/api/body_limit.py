"""A limit on the size of request bodies: a larger one is answered 413 before it is parsed."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shoal.api.errors import error_body


class BodyLimit:
    """ASGI middleware: refuse HTTP request bodies over `max_bytes` with 413, whether the
    client announced the size (`Content-Length`) or streamed it in chunks."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, unless its body is too large."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the server enforces the declared length
            return
        messages, size = [], 0
        while True:  # chunked: read up to the limit, then replay what was read
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _drain(receive, message, budget=3 * self.max_bytes)
                await self._refuse(send)
                return
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await self.app(scope, _replay(messages, receive), send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(error_body(
            "payload_too_large", f"The request body is larger than {self.max_bytes} bytes. "
            "Send less (large files travel as a task's results, not in requests).")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive, message: Message, *, budget: int) -> None:
    """Read and drop the rest of a refused body, up to `budget` bytes, so that a client still
    sending it reads the 413 instead of a reset connection."""
    while message["type"] == "http.request" and message.get("more_body", False) and budget > 0:
        message = await receive()
        budget -= len(message.get("body", b""))


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
