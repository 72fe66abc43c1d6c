"""The worker WebSocket `/ws/worker`: registration, heartbeats, logs and results.

A worker authenticates with its revocable token (`Authorization: Bearer …`), sends
`worker_register` first, and from then on every message goes to the runtime. Results are
handled concurrently (so several land in one group commit) and acknowledged only once durable.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from dataclasses import asdict
from typing import Any

import structlog
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from shoal.api.deps import Services
from shoal.api.direct import direct_of, plain_open, take_texts, wire
from shoal.artifacts.store import validate_files
from shoal.auth.tokens import hash_opaque_token
from shoal.errors import UnstorableText
from shoal.mailbox import UNBOUNDED, Mailbox
from shoal.protocol import (
    AgentLog,
    AgentTokens,
    AttemptUsage,
    ErrorMessage,
    Heartbeat,
    TaskAccepted,
    TaskResult,
    TaskResults,
    WorkerRegister,
    parse_worker_message,
)
from shoal.runtime.fleet import Connection
from shoal.store import accounts
from shoal.store.models import utcnow

router = APIRouter()
log = structlog.get_logger(__name__)
REGISTER_TIMEOUT = 15.0
STORE_PATIENCE = 120.0  # seconds a result waits for room in the store before the socket closes


@router.websocket("/ws/worker")
async def worker_socket(ws: WebSocket) -> None:
    """One worker's connection."""
    services: Services = ws.app.state.services
    token_id = await _authenticate(ws, services)
    if token_id is False:
        await ws.close(code=4401, reason="invalid or revoked worker token")
        return
    await ws.accept()
    outgoing: Mailbox[str | None] = Mailbox(UNBOUNDED)
    found = direct_of(ws)
    raw = found.raw if found is not None else None
    holding = [False]  # the writer holds a frame it may yet suspend on (through Starlette)

    async def send(text: str) -> None:
        # Written here when nothing waits before it and its bytes may go to the transport as
        # they are (the writer's own direct path, without waking its task: the frame of a
        # commit's dispatch leaves in the commit's own turn of the loop); else queued, in order.
        if raw is not None and not holding[0] and not outgoing._items and plain_open(raw):
            try:
                put(raw, text)
            except Exception:  # the writer meets it too, and stops
                outgoing.put_nowait(text)
            return
        outgoing.put_nowait(text)

    async def close(code: int, reason: str) -> None:
        outgoing.put_nowait(None)
        with contextlib.suppress(Exception):
            await ws.close(code=code, reason=reason)

    async with asyncio.TaskGroup() as tg:
        writer = tg.create_task(_write(ws, raw, outgoing, holding))

        async def read() -> None:
            try:
                await _serve(ws, services, token_id, send, close, tg, raw)
            finally:
                outgoing.put_nowait(None)
                writer.cancel()

        # Reading in a task of its own: a message wakes only its few frames, where awaiting
        # here would resume every frame of the ASGI stack above this endpoint (the
        # middlewares and routing, about 18) at each message the worker sends.
        tg.create_task(read())


async def _authenticate(ws: WebSocket, services: Services) -> Any:
    header = ws.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ws.query_params.get("token", "")
    if not token:
        return False
    async with services.db.begin() as conn:
        row = await accounts.live_token(conn, kind="worker", token_hash=hash_opaque_token(token),
                                        now=utcnow())
        if row is None:
            return False
        await accounts.use_token(conn, row.id, utcnow())
    return row.id


def put(raw: Any, text: str) -> None:
    """Write the frame of `text` to `raw`'s transport (a `Direct.raw` that is `plain_open`)."""
    raw.transport.write(wire(text))


async def _write(ws: WebSocket, raw: Any, outgoing: Mailbox[str | None],
                 holding: list[bool]) -> None:
    """Send `outgoing`'s frames, in order, until a None. Under uvicorn (`raw`, the socket's
    `Direct.raw`) a frame goes as its bytes to the socket's transport when nothing stands in
    the way (`direct.plain_open`), as a lane writes a client's (ADR 0045); else through
    Starlette, which waits while the transport is paused, compresses, or raises once the
    socket is closed (and the writer stops). `holding` is set while a frame is on its way
    through Starlette: the socket's `send` writes nothing itself meanwhile."""
    while (text := await outgoing.get()) is not None:
        try:
            if raw is not None and plain_open(raw):
                put(raw, text)
            else:
                holding[0] = True
                await ws.send_text(text)
                holding[0] = False
        except Exception:
            return


async def _serve(
    ws: WebSocket, services: Services, token_id: Any, send: Any, close: Any,
    tg: asyncio.TaskGroup, raw: Any = None,
) -> None:
    runtime = services.runtime
    try:
        first = parse_worker_message(
            await asyncio.wait_for(ws.receive_text(), timeout=REGISTER_TIMEOUT))
    except (ValidationError, UnstorableText) as exc:
        await send(ErrorMessage(code="register_first",
                                message=describe(exc)).model_dump_json())
        await close(4400, "send worker_register first")
        return
    except (TimeoutError, WebSocketDisconnect):
        await close(4400, "send worker_register first")
        return
    if not isinstance(first, WorkerRegister):
        await close(4400, "send worker_register first")
        return
    conn = await runtime.register(first, token_id=token_id, send=send, close=close)
    log.info("worker.connected", worker=first.machine_name, tools=[t.name for t in first.tools])

    def take(text: str) -> bool:  # a message read as it arrives (`take_texts`)
        try:
            msg = parse_worker_message(text)
        except (ValidationError, UnstorableText):
            return False  # the reader below answers it
        _route(runtime, conn, msg, services, send, tg)
        return True

    undo = take_texts(raw, take) if raw is not None else None
    try:
        while True:
            text = await ws.receive_text()
            try:
                msg = parse_worker_message(text)
            except (ValidationError, UnstorableText) as exc:  # answered; the socket stays open
                code = exc.code if isinstance(exc, UnstorableText) else "bad_message"
                await send(ErrorMessage(code=code, message=describe(exc)).model_dump_json())
                continue
            _route(runtime, conn, msg, services, send, tg)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        if undo is not None:
            undo()
        runtime.disconnect(conn)
        log.info("worker.disconnected", worker=conn.name)


def describe(exc: ValidationError | UnstorableText) -> str:
    """What is wrong with a message, field by field, without echoing its values back."""
    if isinstance(exc, UnstorableText):
        return exc.message
    problems = [f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)[:5]]
    return "; ".join(problems)[:1000]


def _route(runtime: Any, conn: Connection, msg: Any, services: Services, send: Any,
           tg: asyncio.TaskGroup) -> None:
    if isinstance(msg, Heartbeat):
        runtime.heartbeat(conn, msg)
    elif isinstance(msg, TaskAccepted):
        runtime.accepted(conn, msg.attempt_id)
    elif isinstance(msg, AgentLog):
        runtime.agent_log(conn, msg)
    elif isinstance(msg, AgentTokens):
        runtime.agent_tokens(msg, conn)
    elif isinstance(msg, AttemptUsage):
        runtime.attempt_usage(conn, msg)
    elif isinstance(msg, TaskResult):
        _route_result(runtime, conn, msg, services, tg)
    elif isinstance(msg, TaskResults):  # queued together, so one commit handles them all
        for result in msg.results:
            _route_result(runtime, conn, result, services, tg)


def _route_result(runtime: Any, conn: Connection, msg: TaskResult, services: Services,
                  tg: asyncio.TaskGroup) -> None:
    if msg.files:  # stored first (off the reader); the runtime acks once it is durable
        tg.create_task(_result(services, conn, msg))
    else:
        runtime.post_result(conn, msg, [], [r.model_dump() for r in msg.rejected_files])


async def _result(services: Services, conn: Connection, msg: TaskResult) -> None:
    """Store a result's files, then hand it to the runtime. While the store cannot take them
    (its disk full, say) try again, keeping the attempt's lease, for up to `STORE_PATIENCE`
    seconds; then close the socket unacknowledged: the worker re-sends after reconnecting."""
    loop = asyncio.get_running_loop()
    give_up, pause = loop.time() + STORE_PATIENCE, 0.2
    while True:
        try:
            manifest, rejected = await ingest_files(services, msg)
            break
        except OSError as exc:
            if pause == 0.2:
                log.warning("worker.result_not_stored", attempt_id=str(msg.attempt_id),
                            error=exc.strerror or type(exc).__name__)
            if loop.time() > give_up:
                await conn.close(1011, "result not stored; reconnect and resend")
                return
            services.runtime.hold(conn, msg.attempt_id)
            await asyncio.sleep(pause)
            pause = min(5.0, pause * 2)
    services.runtime.post_result(conn, msg, manifest, rejected)


async def ingest_files(
    services: Services, msg: TaskResult
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Decode, check and store a result's files; returns (manifest, rejected)."""
    s = services.settings
    decoded: list[tuple[str, bytes]] = []
    rejected = [r.model_dump() for r in msg.rejected_files]
    for f in msg.files:
        try:
            decoded.append((f.path, base64.b64decode(f.content_b64, validate=True)))
        except (binascii.Error, ValueError):
            rejected.append({"path": f.path, "reason": "The file's content is not valid base64."})
    accepted, refused = validate_files(decoded, max_files=s.max_files_per_result,
                                       max_file_bytes=s.max_file_bytes,
                                       max_total_bytes=s.max_result_bytes)
    rejected.extend(asdict(r) for r in refused)
    manifest = []
    for path, data in accepted:
        sha = await services.artifacts.put(data)
        manifest.append({"path": path, "size": len(data), "sha256": sha})
    return manifest, rejected
