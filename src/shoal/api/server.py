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
from shoal.api.listen import bind_socket
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


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """What every control plane tells uvicorn: its WebSockets, and whose proxy headers to
    believe (`trusted_proxies`, in place of uvicorn's own FORWARDED_ALLOW_IPS)."""
    return {"ws_ping_interval": 20, "ws_max_size": 2 * settings.max_result_bytes,
            "ws_per_message_deflate": settings.ws_compression,
            "proxy_headers": bool(settings.trusted_proxies),
            "forwarded_allow_ips": settings.trusted_proxies}


@contextlib.asynccontextmanager
async def running_server(
    settings: Settings, *, port: int = 0, tracing: Tracing | None = None,
    sock: socket.socket | None = None,
) -> AsyncIterator[RunningServer]:
    """Serve `create_app(settings, tracing=tracing)` until the block exits, on `sock` (bound
    already) or else on `port`."""
    app = create_app(settings, tracing=tracing)
    sock = sock or bind_socket(settings.host, port)
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
        shown = f"[{host}]" if ":" in host else host
        yield RunningServer(url=f"http://{shown}:{bound}", app=app)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
