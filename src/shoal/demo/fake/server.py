"""The fake model server: one ASGI app that speaks every vendor protocol Shoal drives.

`create_fake_app(decide)` mounts the routes of each protocol module (`openai_chat`,
`openai_responses`, `anthropic`, `gemini`, `ollama`, and `embeddings` for both vendors'
embeddings endpoints), and mounts the fake arXiv and Crossref (`literature`) at `/literature`
for `shoal mcp literature`. A protocol handler decodes the request
into a `Conversation` and calls `exchange.answer()`, which records it and asks the script
`decide` for the reply; the handler then encodes the reply. Every request, conversation or not,
is kept in `app.state.log` so tests can assert what a tool sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from shoal.demo.fake import (
    anthropic,
    embeddings,
    gemini,
    literature,
    ollama,
    openai_chat,
    openai_responses,
)
from shoal.demo.fake.exchange import DEMO_MODEL, request_log
from shoal.demo.fake.wire import Conversation, Reply
from shoal.errors import Unavailable


def create_fake_app(decide: Callable[[Conversation], Reply]) -> Starlette:
    """The fake model server as an ASGI app answering by the script `decide`;
    `app.state.log` holds every request."""
    # Gemini first: its `GET /v1/models` takes only requests with a Google key, the rest
    # fall through to OpenAI's listing.
    routes = [*gemini.routes(), *openai_chat.routes(), *openai_responses.routes(),
              *anthropic.routes(), *ollama.routes(), *embeddings.routes()]
    app = Starlette(routes=[*routes, Route("/_fake/log", _log_summary, methods=["GET"]),
                            Mount("/literature", app=literature.create_literature_app())])
    app.state.log = []
    app.state.decide = decide
    app.state.ids = itertools.count(1)
    app.state.faults = Counter()
    return app


async def _log_summary(request: Request) -> Response:
    """`GET /_fake/log`: what the server received, for tests that run it in another process."""
    return JSONResponse([
        {"api": r.api, "method": r.method, "path": r.path,
         "user_agent": r.headers.get("user-agent", ""),
         "model": r.conversation.model if r.conversation else None}
        for r in request_log(request.app)])


# ---- running it -------------------------------------------------------------------------


class _Server(uvicorn.Server):
    """uvicorn's server, plus an event for "listening" and optional signal handling."""

    def __init__(self, config: uvicorn.Config, *, handle_signals: bool) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()
        self._handle_signals = handle_signals

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if not self._handle_signals:  # in-process use (tests): leave the host's handlers alone
            yield
            return
        with super().capture_signals():
            yield


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (0: any free port), or `Unavailable` saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"The demo model cannot listen on {host}:{port}: {exc.strerror or exc}. Pick "
            "another port (or 0 for any free one), or stop what is using this one.",
            details={"host": host, "port": port},
        ) from exc
    return sock


@contextlib.asynccontextmanager
async def serving(
    app: Starlette, sock: socket.socket, *, handle_signals: bool, log_level: str
) -> AsyncIterator[tuple[str, asyncio.Task[None]]]:
    """Serve `app` on `sock`; yield its root URL (no path) and the serving task."""
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level=log_level, log_config=None, lifespan="off",
                            ws="none", access_log=False, timeout_graceful_shutdown=5)
    server = _Server(config, handle_signals=handle_signals)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    task.add_done_callback(lambda _: server.ready.set())
    try:
        await server.ready.wait()
        if task.done():
            task.result()  # re-raises a startup error
            raise Unavailable("The demo model stopped while starting. See the log above.")
        yield f"http://{url_host}:{port}", task
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def running_fake_server(
    app: Starlette, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run `app` (from `create_fake_app`) in this process; yield its root URL
    (`http://host:port`)."""
    with bind(host, port) as sock:
        async with serving(app, sock, handle_signals=False,
                           log_level="warning") as (root, _):
            yield root


async def serve_fake_server(app: Starlette, host: str, port: int) -> None:
    """Serve `app` on `host:port` until cancelled or interrupted (Ctrl-C)."""
    with bind(host, port) as sock:
        async with serving(app, sock, handle_signals=True,
                           log_level="info") as (root, task):
            logging.getLogger("shoal.demo_model").info(
                "Demo model (scripted, not a real model) at %s — OpenAI base URL %s/v1, "
                "model name %r; it also speaks the Anthropic, Gemini and Ollama protocols.",
                root, root, DEMO_MODEL)
            await asyncio.shield(task)  # shielded: a cancellation shuts down gracefully
