"""The client WebSocket `/ws`: subscribe to event types (optionally one task), replay with `since`.

Signing in: `Authorization: Bearer <access token>` on the upgrade request, or a first frame
`{"type": "auth", "token": "<access token>"}` within ten seconds (browsers cannot set headers,
and a token in the URL ends up in proxies' logs); `?token=` still works.

Client → server: `{"type": "subscribe", "event_types": [...], "task_id"?: ..., "since"?: N,
"any_task_types"?: [...], "batch"?: true}` (fields may also sit under `data`),
`{"type": "unsubscribe", "event_types": [...]}`, `{"type": "ping"}`, and `{"type": "answer",
"checkpoint_id": ..., "answer": "..."}` (a workflow's question, answered as `POST
/api/v1/checkpoints/{id}/answer` answers it: `shoal.api.decisions`). With a `task_id`, only
that task's events are replayed and sent, except the `any_task_types`, which come live from
every task of the user's (a page following one task still hears of every checkpoint); and
`"names": "workflow"` gives each event its task's workflow names for it (`events:` in the
document) a `name` beside its `type` (seed 002's `task_started`, …).

Server → client: `{type, data, timestamp, seq}` events (with `batch`, those that queued up
while the last frame was being sent come together, in order, as `{"type": "batch", "items":
[...]}`); `caught_up` (`data.seq`) once the replay a `since` asked for has been sent; `pong`,
`subscribed` (`data.since`: the stream carries the events after it), `unsubscribed`,
`answered` (`data`: `checkpoint_id`, `status: "answered"`; it comes before the events the
answer causes), and `error` (`data`: `code`, `message`, `field`) for a message it cannot take
— for an `answer`, the REST route's code and message: `not_found` (an unknown checkpoint, or
another user's), `checkpoint_decided` or `wrong_decision` (409), `validation_error` naming
`answer` (empty, only blanks, or over 20,000 characters); the socket stays open after an
error. Every frame of the old subscription comes before `subscribed`, every
frame of the new one after it.

Where a subscription starts:

- With `since` in the message: every event it wants after `since` (a page redrawing a task
  from its history asks for it again), except those the socket sent before its first
  subscription because of the URL's `since` (the two are one resume).
- Without it, on a socket opened with `?since=N` (a client resuming): every event it wants
  after N that this socket has not sent yet, whichever subscriptions came before; so a
  client that resumes with the URL's `since` and then subscribes, changes task, or comes
  back to a task, misses nothing and gets nothing twice.
- Without it on any other socket: from now on; or, when it wants less than the subscription
  before (one task of all, fewer types), from where that one was, so nothing it was about
  to send is lost.

A socket opened with `?since=N` starts as if subscribed to every event of the user's after N;
any other socket sends no event before its first subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.routing import WebSocketRoute

from shoal.api import decisions, fanout, streams
from shoal.api.deps import Services, bearer_token
from shoal.api.direct import Direct, direct_of
from shoal.api.subscriptions import Interest, Sent, Span
from shoal.auth.tokens import Claims, decode_token
from shoal.errors import NotFound, ShoalError
from shoal.events import EventType, as_json
from shoal.limits import MAX_INT64, value_problem
from shoal.metrics import StreamKind
from shoal.store import queries
from shoal.store.convert import task_from_row
from shoal.store.models import utcnow
from shoal.workflows.document import WorkflowDocument
from shoal.workflows.event_names import renamer

router = APIRouter()
ALL_TYPES = frozenset(t.value for t in EventType)
BATCH = 200  # events at most in one `batch` frame
AUTH_TIMEOUT = 10.0  # seconds a socket without credentials has to send its `auth` frame
UNAUTHORIZED = 4401


class _ClientMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class Subscribe(_ClientMessage):
    """Which events to receive: types (all if omitted), one task, and where to resume."""

    type: Literal["subscribe"]
    event_types: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=64, description="The event types to receive; none: every type.")
    task_id: uuid.UUID | None = Field(None, description="Only this task's events (except "
                                                        "`any_task_types`).")
    since: int | None = Field(None, ge=0, le=MAX_INT64,
                              description="Replay the events after this `seq` first.")
    any_task_types: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=64, description="With `task_id`: these types still come live from "
                                         "every task of yours (say, `checkpoint_ready`).")
    batch: bool = Field(False, description="Events that queue up during a burst may come "
                                           "together as one `batch` frame.")
    names: Literal["shoal", "workflow"] = Field(
        "shoal", description="`workflow`, with a `task_id`: events its workflow names "
                             "(`events:`) carry that `name` beside their `type`.")


class Unsubscribe(_ClientMessage):
    """Stop receiving some event types (all if omitted)."""

    type: Literal["unsubscribe"]
    event_types: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=64, description="The event types to stop; none: every type.")


class Ping(_ClientMessage):
    """Answered with `pong`."""

    type: Literal["ping"]


class Auth(_ClientMessage):
    """The access token, as the first frame of a socket opened without one."""

    type: Literal["auth"]
    token: str = Field(min_length=1, max_length=8192, description="An access token.")


class Answer(_ClientMessage):
    """Answer a workflow's question, as `POST /api/v1/checkpoints/{id}/answer` does: the
    checkpoint's id is taken as the route takes it (one that is no id is not found), and the
    answer is checked by the route's body (`AnswerBody`), so that both refuse alike."""

    type: Literal["answer"]
    checkpoint_id: str = Field(max_length=1024, description="The question's checkpoint.")
    answer: str = Field(description="The answer (1 to 20,000 characters, not only blanks).")


ClientMessage = Annotated[Subscribe | Unsubscribe | Ping | Auth | Answer,
                          Field(discriminator="type")]
_adapter: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


class BadMessage(Exception):
    """A client frame that cannot be taken: what to send back in the `error` frame."""

    def __init__(self, message: str, *, field: str | None = None,
                 code: str = "bad_message") -> None:
        super().__init__(message)
        self.message, self.field, self.code = message, field, code


@dataclass(slots=True)
class _Plan:
    """A stream to start: what it carries, where it starts, whether it skips what the socket
    has already sent, and whether it says `caught_up` after its replay."""

    interest: Interest
    after: int
    skip: bool
    announce: bool


@dataclass(slots=True)
class _Socket:
    """One client socket: its user, its URL's `since`, what it has sent, and its stream."""

    ws: WebSocket
    services: Services
    user_id: uuid.UUID
    resume_from: int | None  # the URL's `since`: this socket resumes a client's stream
    sent: Sent = field(default_factory=Sent)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one frame at a time
    interest: Interest = field(default_factory=lambda: Interest(ALL_TYPES))
    span: Span | None = None  # the current stream's
    subscribed: bool = False
    catching_up: bool = False  # a replay is under way: its `caught_up` is still owed
    rename: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # names=workflow's
    lanes: fanout.Lanes | None = None  # the app's fast lanes (None: this socket never uses one)
    direct: Direct | None = None  # the server's side: when and how a lane writes to it

    async def send(self, frame: dict[str, Any]) -> None:
        """One frame (the caller holds `lock`)."""
        await self.ws.send_text(json.dumps(frame))


async def client_socket(ws: WebSocket) -> None:
    """Live events for a signed-in user."""
    services: Services = ws.app.state.services
    await ws.accept()  # first, so that a browser sees the 4401 code and the reason
    claims = await _sign_in(ws, services)
    if claims is None:
        return
    with services.runtime.metrics.open_stream(StreamKind.WEBSOCKET):
        await _serve(ws, services, claims)


# A plain Starlette route, not FastAPI's `@router.websocket`: the socket takes no dependencies,
# and FastAPI's wrapper keeps two exit stacks and its frames for as long as a watcher stays
# (about 3 kB a watcher; benchmarks/README).
router.routes.append(WebSocketRoute("/ws", client_socket))


async def _serve(ws: WebSocket, services: Services, claims: Claims) -> None:
    try:
        resume_from = _query_since(ws.query_params.get("since"))
    except BadMessage as exc:
        resume_from = None
        await _error(ws, exc)
    sock = _Socket(ws, services, claims.user_id, resume_from)
    sock.direct = direct_of(ws)
    sock.lanes = getattr(ws.app.state, "lanes", None) if sock.direct is not None else None
    async with asyncio.TaskGroup() as tg:
        pusher: list[asyncio.Task[None]] = []
        if resume_from is not None:  # as if subscribed to everything after the URL's since
            plan = _Plan(sock.interest, resume_from, skip=False, announce=True)
            pusher.append(tg.create_task(_push(sock, _begin(sock, plan))))

        async def resubscribe(interest: Interest, since: int | None) -> None:
            """Stop the stream at a frame's edge, say `subscribed`, start the next one."""
            for task in pusher:
                task.cancel()
            await asyncio.gather(*pusher, return_exceptions=True)
            plan = await _plan(sock, interest, since)
            await sock.send(_frame("subscribed", {
                "event_types": sorted(interest.types),
                "task_id": str(interest.task_id) if interest.task_id else None,
                "since": plan.after}))
            pusher[:] = [tg.create_task(_push(sock, _begin(sock, plan)))]

        try:
            await _read(sock, resubscribe)
        finally:
            for task in pusher:
                task.cancel()


async def _plan(sock: _Socket, interest: Interest, since: int | None) -> _Plan:
    """Where a new subscription's stream starts (see the module's docstring)."""
    first, sock.subscribed = not sock.subscribed, True
    if since is not None:  # exactly what it asks for, but what the URL's stream sent
        skip = first and sock.resume_from is not None
        return _Plan(interest, _start(sock, interest, since, skip), skip, announce=True)
    if sock.resume_from is not None:  # a resuming socket: everything after the URL's since
        return _Plan(interest, _start(sock, interest, sock.resume_from, True), True, True)
    current = sock.span
    if current is not None and current.interest.covers(interest):
        base = current.through  # narrower: carry on where the stream was
    else:
        base = await streams.current_seq(sock.services)  # from now on
        sock.catching_up = False
    return _Plan(interest, _start(sock, interest, base, True), True, sock.catching_up)


def _start(sock: _Socket, interest: Interest, base: int, skip: bool) -> int:
    return sock.sent.resume_point(interest, base) if skip else base


async def _sign_in(ws: WebSocket, services: Services) -> Claims | None:
    """The user behind the socket, from its header, its URL or its first frame; None (and
    the socket closed with 4401) without a valid access token."""
    token = bearer_token(ws) or ws.query_params.get("token")
    try:
        if not token:
            token = await _auth_frame(ws)
        return decode_token(token, settings=services.settings, expected_type="access")
    except (ShoalError, BadMessage) as exc:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await ws.close(code=UNAUTHORIZED, reason=exc.message[:120])
        return None
    except (WebSocketDisconnect, TimeoutError):
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await ws.close(code=UNAUTHORIZED, reason="send an auth frame first")
        return None


async def _auth_frame(ws: WebSocket) -> str:
    msg = _parse(await asyncio.wait_for(ws.receive_text(), timeout=AUTH_TIMEOUT))
    if not isinstance(msg, Auth):
        raise BadMessage("Sign in first: send {\"type\": \"auth\", \"token\": \"<access "
                         "token>\"} as the first frame.", code="unauthorized")
    return msg.token


Resubscribe = Callable[[Interest, int | None], Awaitable[None]]


async def _read(sock: _Socket, resubscribe: Resubscribe) -> None:
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            raw = await sock.ws.receive_text()
            async with sock.lock:
                await _answer(sock, raw, resubscribe)


async def _answer(sock: _Socket, raw: str, resubscribe: Resubscribe) -> None:
    """Act on one client frame (holding the socket's lock: no event frame in between)."""
    try:
        msg = _parse(raw)
    except BadMessage as exc:
        await _error(sock.ws, exc)
        return
    match msg:
        case Ping():
            await sock.send(_frame("pong", {}))
        case Subscribe():
            sock.rename = await _renamer(sock, msg)
            types = msg.event_types
            await resubscribe(Interest(
                types=frozenset(t for t in types if t in ALL_TYPES) if types else ALL_TYPES,
                task_id=msg.task_id, batch=msg.batch,
                also=frozenset(t for t in msg.any_task_types or () if t in ALL_TYPES),
            ), msg.since)
        case Unsubscribe():
            old = sock.interest
            await resubscribe(Interest(old.types - set(msg.event_types or ALL_TYPES),
                                       old.task_id, old.also, old.batch), None)
            await sock.send(_frame("unsubscribed", {"event_types": sorted(sock.interest.types)}))
        case Auth():
            await _error(sock.ws, BadMessage("This socket is signed in already.",
                                             code="already_signed_in"))
        case Answer():
            await _answer_question(sock, msg)


async def _answer_question(sock: _Socket, msg: Answer) -> None:
    """`answered`, or the error the REST route would give, as an `error` frame. Under the
    socket's lock, so `answered` comes before the events the answer causes."""
    services = sock.services
    try:
        await services.limiter.hit(f"user:{sock.user_id}",
                                   limit=services.settings.rate_limit_per_minute, window=60)
        body = decisions.answer_body(msg.answer)
        done = await decisions.answer(services, msg.checkpoint_id, sock.user_id, body)
    except ShoalError as exc:
        await _error(sock.ws, BadMessage(exc.message, field=_field_of(exc), code=exc.code))
        return
    await sock.send(_frame("answered", {"checkpoint_id": str(done.checkpoint_id),
                                        "status": done.status}))


def _field_of(exc: ShoalError) -> str | None:
    """The field a refused answer is about: a 422's first, the checkpoint's id of a 404."""
    details = exc.details
    if isinstance(details, list) and details and isinstance(details[0], dict):
        return str(details[0].get("field") or "") or None
    if isinstance(details, dict) and details.get("field"):
        return str(details["field"])
    return "checkpoint_id" if isinstance(exc, NotFound) else None


async def _renamer(sock: _Socket,
                   msg: Subscribe) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """What gives a `names=workflow` subscription's events their workflow's names (a task of
    the user's whose document has `events:`), else None."""
    if msg.names != "workflow" or msg.task_id is None:
        return None
    async with sock.services.db.connection() as conn:
        row = await queries.get_task(conn, msg.task_id, user_id=sock.user_id)
    document = task_from_row(row).meta.workflow if row is not None else None
    if not document:
        return None
    return renamer(WorkflowDocument.model_validate(document).events,
                   f"/api/v1/tasks/{msg.task_id}/report")


def _parse(raw: str) -> ClientMessage:
    """A client frame as a typed message, or `BadMessage` naming the field at fault."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise BadMessage("Send JSON objects with a 'type'.") from None
    if not isinstance(data, dict):
        raise BadMessage("Send JSON objects with a 'type'.")
    if isinstance(data.get("data"), dict):
        data = {**{k: v for k, v in data.items() if k != "data"}, **data["data"]}
    if found := value_problem(data):
        raise BadMessage(f"{found[0]}: {found[1]}.", field=found[0], code="unstorable_text")
    try:
        return _adapter.validate_python(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in first["loc"][1:]) or "type"  # loc[0]: the tag
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            raise BadMessage(f"Unknown message type {data.get('type')!r}: send subscribe, "
                             "unsubscribe, ping, answer or auth.", field="type") from None
        raise BadMessage(f"{field}: {first['msg']}.", field=field) from None


def _begin(sock: _Socket, plan: _Plan) -> _Plan:
    """Make `plan` the socket's stream (its interest, and its span of what it sends)."""
    sock.interest, sock.catching_up = plan.interest, plan.announce
    sock.span = sock.sent.open(plan.interest, plan.after)
    return plan


async def _push(sock: _Socket, plan: _Plan) -> None:
    """Stream `plan` to the client; each frame is sent, and counted as sent, under the lock.
    Once live (or at once, if its lane is where the plan starts), the socket may be handed
    over to its lane (`shoal.api.fanout`); when the lane lets it go, it carries on with a
    stream of its own from where its span is."""
    interest, span = plan.interest, sock.span
    assert span is not None
    seat = _seat(sock, plan)
    member = sock.lanes.join_at(seat, plan.after) if (
        sock.lanes is not None and seat is not None and not plan.announce) else None
    with contextlib.suppress(WebSocketDisconnect):  # the reader sees the client leave too
        while True:
            if member is None:
                follow = streams.Follow() if seat is not None else None  # (no lane: no offer)
                stream = streams.replay_then_live_batches(
                    sock.services, user_id=sock.user_id, task_id=interest.task_id,
                    since=plan.after, also=interest.also, announce=plan.announce,
                    kind=StreamKind.WEBSOCKET, limit=seat.limit if seat else streams.PAGE,
                    follow=follow)
                try:
                    member = await _send_stream(sock, plan, stream, span, follow, seat)
                finally:
                    await stream.aclose()  # its bus subscription: now, not when collected
            if member is None or sock.lanes is None:
                return
            await sock.lanes.ride(member)
            member = None
            # Let go where it is: every event it wanted through `span.through` was sent.
            plan = _Plan(interest, span.through, skip=True, announce=False)


def _seat(sock: _Socket, plan: _Plan) -> fanout.Seat | None:
    """The socket's stream as its lane would see it; None if it may not use one (it asks for
    other tasks' events too, or renames events; or no lane can tell when it can write)."""
    if sock.lanes is None or sock.direct is None or plan.interest.also or sock.rename:
        return None
    assert sock.span is not None
    return fanout.Seat(sock.user_id, plan.interest, StreamKind.WEBSOCKET,
                       BATCH if plan.interest.batch else streams.PAGE, sock.direct.send,
                       sock.direct.raw, sock.lock, sock.direct.writable, sock.sent, sock.span)


async def _send_stream(sock: _Socket, plan: _Plan, stream: AsyncIterator[list[dict[str, Any]]],
                       span: Span, follow: streams.Follow | None = None,
                       seat: fanout.Seat | None = None) -> fanout.Member | None:
    """Each list of the stream as one `batch` frame (with `batch`) or a frame per event; what
    the bus queued while a frame was being sent comes in the next list. The lane's member, if
    the socket joined one after a list (the stream is then left)."""
    interest = plan.interest
    wants, skip, sent = interest.wants, plan.skip, sock.sent
    lanes = sock.lanes if follow is not None and seat is not None else None
    async for items in stream:
        async with sock.lock:
            out = [item for item in items if item["type"] == "caught_up" or (
                wants(item) and not (skip and sent.has_sent(item)))]
            if sock.rename is not None:
                out = [sock.rename(item) for item in out]
            if len(out) == 1 or (out and not interest.batch):
                for item in out:
                    await sock.ws.send_text(as_json(item))
            elif out:  # each event encoded once, for every socket that sends it
                await sock.ws.send_text(
                    '{"type": "batch", "items": [' + ", ".join(map(as_json, out)) + "]}")
            if sent.record_all(span, items):
                sock.catching_up = False
            if lanes is not None and follow is not None and seat is not None and (
                    follow.ready and not sock.catching_up):
                member = await lanes.join(sock.services, seat, follow)
                if member is not None:
                    return member
    return None


def _frame(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "data": data,
            "timestamp": utcnow().isoformat().replace("+00:00", "Z")}


async def _error(ws: WebSocket, exc: BadMessage) -> None:
    await ws.send_text(json.dumps(_frame("error", {"code": exc.code, "message": exc.message,
                                                   "field": exc.field})))


def _query_since(value: str | None) -> int | None:
    """`?since=` of the upgrade request: None (from now on) if absent."""
    if value is None or value == "":
        return None
    if not value.isdigit() or int(value) > MAX_INT64:
        raise BadMessage(f"since must be an event sequence number, 0 to {MAX_INT64}; "
                         "following from now on instead.", field="since")
    return int(value)
