"""A limit on the size of request bodies: a larger one is answered 413 before it is parsed."""

from __future__ import annotations

import asyncio
import contextlib
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shoal.api.errors import error_body

DRAIN_BYTES = 64 * 1024 * 1024  # of a refused body read and dropped, so the client sees 413
DRAIN_SECONDS = 10.0  # and for at most this long


class BodyLimit:
    """ASGI middleware: refuse HTTP request bodies over `max_bytes` with 413, whether the
    client announced the size (`Content-Length`) or streamed it in chunks.

    A refused body is read and dropped (up to `DRAIN_BYTES`, for up to `DRAIN_SECONDS`)
    before the 413 and `Connection: close` go out: a server that closes while the client is
    still sending makes the kernel reset the connection, and the client never reads the 413.
    A client that sent `Expect: 100-continue` has sent no body yet: it is answered at once."""

    def __init__(self, app: ASGIApp, *, max_bytes: int,
                 larger: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = larger or {}  # path → its own limit (uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, unless its body is too large."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope["path"], self.max_bytes)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            if headers.get(b"expect", b"").lower() != b"100-continue":
                await _drain(receive, {"type": "http.request", "more_body": True})
            await self._refuse(send, limit)
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the server enforces the declared length
            return
        messages, size = [], 0
        while True:  # chunked: read up to the limit, then replay what was read
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > limit:
                await _drain(receive, message)
                await self._refuse(send, limit)
                return
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await self.app(scope, _replay(messages, receive), send)

    async def _refuse(self, send: Send, limit: int) -> None:
        body = json.dumps(error_body(
            "payload_too_large", f"The request body is larger than {limit} bytes. Send less "
            "(files for a task go to POST /api/v1/uploads, within its own limit).")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive, message: Message) -> None:
    """Read and drop the rest of a refused body, within `DRAIN_BYTES` and `DRAIN_SECONDS`."""
    budget = DRAIN_BYTES
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            while (message["type"] == "http.request" and message.get("more_body", False)
                   and budget > 0):
                message = await receive()
                budget -= len(message.get("body", b""))


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
