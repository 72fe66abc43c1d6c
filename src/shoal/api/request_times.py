"""HTTP request times by route template, for `shoal_http_request_duration_seconds`."""

from __future__ import annotations

import time

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shoal.metrics import Metrics

log = structlog.get_logger(__name__)


class RequestTimes:
    """ASGI middleware: time each HTTP request from arrival to its last byte (an event stream
    to its headers: it lasts as long as its client stays) under its route's template, e.g.
    `/api/v1/tasks/{task_id}`, never the path a client sent; log one slower than
    `slow_request_seconds`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on and observe how long it took."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500, False]  # the status sent; whether the clock has stopped

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = dict(message.get("headers") or ())
                if headers.get(b"content-type", b"").startswith(b"text/event-stream"):
                    _observe(scope, status[0], start)
                    status[1] = True
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if not status[1]:
                _observe(scope, int(status[0]), start)


def _observe(scope: Scope, status: int, start: float) -> None:
    state = getattr(scope["app"].state, "services", None)
    if state is None:
        return  # before start-up finished
    metrics: Metrics = state.runtime.metrics
    route = getattr(scope.get("route"), "path", None)
    seconds = time.perf_counter() - start
    metrics.request(scope["method"], route, status, seconds)
    slow = state.settings.slow_request_seconds
    if slow and seconds > slow:
        log.warning("http.slow_request", method=scope["method"], route=route or "unmatched",
                    status=status, seconds=round(seconds, 3))
