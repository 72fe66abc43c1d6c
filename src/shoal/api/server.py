"""Run a real control plane in-process on an ephemeral port (tests, benchmarks, `shoal up`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI

from shoal.api.app import create_app
from shoal.api.deps import Services
from shoal.config import Settings
from shoal.tracing import Tracing


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A control plane listening on `url`."""

    url: str
    app: FastAPI

    @property
    def services(self) -> Services:
        """The app's services (store, runtime, bus)."""
        services: Services = self.app.state.services
        return services


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket (port 0: any free port).

    Created with `IPPROTO_TCP` named, not 0: asyncio turns Nagle's algorithm off
    (`TCP_NODELAY`) only on sockets whose protocol says TCP, and accepted connections inherit
    it. With Nagle on, a burst of small WebSocket messages to one worker (say, a layer of
    `execute_task`) waited for the worker's delayed ACK: about 40 ms (ADR 0010).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    return sock


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """What every control plane tells uvicorn: its WebSockets, and whose proxy headers to
    believe (`trusted_proxies`, in place of uvicorn's own FORWARDED_ALLOW_IPS)."""
    return {"ws_ping_interval": 20, "ws_max_size": 2 * settings.max_result_bytes,
            "ws_per_message_deflate": settings.ws_compression,
            "proxy_headers": bool(settings.trusted_proxies),
            "forwarded_allow_ips": settings.trusted_proxies}


@contextlib.asynccontextmanager
async def running_server(
    settings: Settings, *, port: int = 0, tracing: Tracing | None = None
) -> AsyncIterator[RunningServer]:
    """Serve `create_app(settings, tracing=tracing)` until the block exits."""
    app = create_app(settings, tracing=tracing)
    sock = bind_socket(settings.host, port)
    config = uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on",
                            **uvicorn_options(settings))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("The control plane stopped during start-up.")
            await asyncio.sleep(0.01)
        host, bound = sock.getsockname()[:2]
        yield RunningServer(url=f"http://{host}:{bound}", app=app)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
