"""The fake model server: one ASGI app that speaks every vendor protocol Shoal drives.

`create_fake_app()` mounts the routes of each protocol module (`openai_chat`,
`openai_responses`, `anthropic`, `gemini`, `ollama`). A protocol handler decodes the request
into a `Conversation` and calls `answer()`, which records the request, asks the script for a
reply, applies scripted faults (counting `times` per conversation), fits the reply's tool
calls to the tools the client offered, and waits out a scripted delay. The handler then
encodes the reply. Every request, conversation or not, is kept in `app.state.log` so tests can
assert what a tool sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shoal.errors import Unavailable
from shoal.testing.fake import anthropic, gemini, ollama, openai_chat, openai_responses
from shoal.testing.fake.wire import Conversation, Reply, fit_calls

DEMO_MODEL = "shoal-demo"
LABEL = "[demo model]"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fake received."""

    api: str
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    conversation: Conversation | None = None


def create_fake_app() -> Starlette:
    """The fake model server as an ASGI app; `app.state.log` holds every request."""
    # Gemini first: its `GET /v1/models` takes only requests with a Google key, the rest
    # fall through to OpenAI's listing.
    routes = [*gemini.routes(), *openai_chat.routes(), *openai_responses.routes(),
              *anthropic.routes(), *ollama.routes()]
    app = Starlette(routes=[*routes, Route("/_fake/log", _log_summary, methods=["GET"])])
    app.state.log = []
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


def request_log(app: Starlette) -> list[RecordedRequest]:
    """Every request `app` has received, oldest first."""
    log: list[RecordedRequest] = app.state.log
    return log


def recorded_requests(app: Starlette, api: str | None = None) -> list[dict[str, Any]]:
    """The JSON bodies of the conversation requests `app` received (of one `api`), oldest first."""
    return [r.body for r in request_log(app)
            if r.conversation is not None and (api is None or r.api == api)]


def record(request: Request, api: str, body: Any = None,
           conversation: Conversation | None = None) -> None:
    """Keep a request in the log (protocol modules call this for non-conversation routes)."""
    request_log(request.app).append(RecordedRequest(
        api=api, method=request.method, path=request.url.path, query=request.url.query,
        headers={k.lower(): v for k, v in request.headers.items()}, body=body,
        conversation=conversation))


def next_id(request: Request) -> int:
    """A number unique to this server, for response and call ids."""
    return int(next(request.app.state.ids))


async def answer(request: Request, conversation: Conversation, body: Any) -> Reply | None:
    """Record the request and decide the reply; None if the client left during a delay."""
    from shoal.testing.demo_model import decide_reply

    record(request, conversation.api, body, conversation)
    reply = decide_reply(conversation)
    fault = reply.fault
    if fault is not None and fault.times is not None:
        key = _conversation_key(conversation)
        counter: Counter[str] = request.app.state.faults
        counter[key] += 1
        if counter[key] > fault.times:
            reply = dataclasses.replace(reply, fault=None)
    reply = dataclasses.replace(reply, tool_calls=fit_calls(reply.tool_calls, conversation))
    if reply.delay and await client_left_during(request, reply.delay):
        return None
    return reply


def _conversation_key(conversation: Conversation) -> str:
    users = conversation.texts("user")
    first = users[0] if users else ""
    return hashlib.sha256(f"{conversation.api}\0{first}".encode()).hexdigest()


async def client_left_during(request: Request, seconds: float) -> bool:
    """Wait `seconds`, unless the client hangs up first (then say so).

    The body has been read, so the next ASGI message can only be the disconnect.
    """
    try:
        async with asyncio.timeout(seconds):
            while (await request.receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return False
    return True


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
    app: Starlette | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run the fake model server in this process; yield its root URL (`http://host:port`).

    Pass your own `app` (from `create_fake_app`) to read its request log.
    """
    with bind(host, port) as sock:
        async with serving(app or create_fake_app(), sock, handle_signals=False,
                           log_level="warning") as (root, _):
            yield root


async def serve_fake_server(host: str, port: int) -> None:
    """Serve the fake model server on `host:port` until cancelled or interrupted (Ctrl-C)."""
    with bind(host, port) as sock:
        async with serving(create_fake_app(), sock, handle_signals=True,
                           log_level="info") as (root, task):
            logging.getLogger("shoal.demo_model").info(
                "Demo model (scripted, not a real model) at %s — OpenAI base URL %s/v1, "
                "model name %r; it also speaks the Anthropic, Gemini and Ollama protocols.",
                root, root, DEMO_MODEL)
            await asyncio.shield(task)  # shielded: a cancellation shuts down gracefully
