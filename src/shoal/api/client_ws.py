"""The client WebSocket `/ws`: subscribe to event types (optionally one task), replay with `since`.

Signing in: `Authorization: Bearer <access token>` on the upgrade request, or a first frame
`{"type": "auth", "token": "<access token>"}` within ten seconds (browsers cannot set headers,
and a token in the URL ends up in proxies' logs); `?token=` still works.

Client → server: `{"type": "subscribe", "event_types": [...], "task_id"?: ..., "since"?: N,
"any_task_types"?: [...], "batch"?: true}` (fields may also sit under `data`),
`{"type": "unsubscribe", "event_types": [...]}`, `{"type": "ping"}`. With a `task_id`, only
that task's events are replayed and sent, except the `any_task_types`, which come live from
every task of the user's (a page following one task still hears of every checkpoint).

Server → client: `{type, data, timestamp, seq}` events (with `batch`, those that queued up
while the last frame was being sent come together, in order, as `{"type": "batch", "items":
[...]}`); `caught_up` (`data.seq`) once the replay a `since` asked for has been sent; `pong`,
`subscribed`, `unsubscribed`, and `error` (`data`: `code`, `message`, `field`) for a message
it cannot take; the socket stays open after an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from shoal.api import streams
from shoal.api.deps import Services, bearer_token
from shoal.auth.tokens import Claims, decode_token
from shoal.errors import ShoalError
from shoal.events import EventType
from shoal.limits import MAX_INT64, value_problem
from shoal.metrics import StreamKind
from shoal.store.models import utcnow

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
    event_types: list[Annotated[str, Field(max_length=64)]] | None = Field(None, max_length=64)
    task_id: uuid.UUID | None = None
    since: int | None = Field(None, ge=0, le=MAX_INT64)
    any_task_types: list[Annotated[str, Field(max_length=64)]] | None = Field(None, max_length=64)
    batch: bool = False  # events that queue up during a burst may come as one `batch` frame


class Unsubscribe(_ClientMessage):
    """Stop receiving some event types (all if omitted)."""

    type: Literal["unsubscribe"]
    event_types: list[Annotated[str, Field(max_length=64)]] | None = Field(None, max_length=64)


class Ping(_ClientMessage):
    """Answered with `pong`."""

    type: Literal["ping"]


class Auth(_ClientMessage):
    """The access token, as the first frame of a socket opened without one."""

    type: Literal["auth"]
    token: str = Field(min_length=1, max_length=8192)


ClientMessage = Annotated[Subscribe | Unsubscribe | Ping | Auth, Field(discriminator="type")]
_adapter: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


class BadMessage(Exception):
    """A client frame that cannot be taken: what to send back in the `error` frame."""

    def __init__(self, message: str, *, field: str | None = None,
                 code: str = "bad_message") -> None:
        super().__init__(message)
        self.message, self.field, self.code = message, field, code


class _Subscription:
    """What one client wants to see."""

    def __init__(self) -> None:
        self.types: set[str] = set(ALL_TYPES)
        self.task_id: uuid.UUID | None = None
        self.also: frozenset[str] = frozenset()  # types wanted from every task
        self.batch = False

    def wants(self, item: dict[str, Any]) -> bool:
        if item["type"] in self.also:
            return True
        if item["type"] not in self.types:
            return False
        return self.task_id is None or item["data"].get("task_id") == str(self.task_id)


@router.websocket("/ws")
async def client_socket(ws: WebSocket) -> None:
    """Live events for a signed-in user."""
    services: Services = ws.app.state.services
    await ws.accept()  # first, so that a browser sees the 4401 code and the reason
    claims = await _sign_in(ws, services)
    if claims is None:
        return
    with services.runtime.metrics.open_stream(StreamKind.WEBSOCKET):
        await _serve(ws, services, claims)


async def _serve(ws: WebSocket, services: Services, claims: Claims) -> None:
    sub = _Subscription()
    state: dict[str, Any] = {"since": None}
    try:
        state["since"] = _query_since(ws.query_params.get("since"))
    except BadMessage as exc:
        await _error(ws, exc)
    async with asyncio.TaskGroup() as tg:
        pusher = [tg.create_task(_push(ws, services, claims.user_id, sub, state))]

        def restart() -> None:
            pusher[0].cancel()
            pusher[0] = tg.create_task(_push(ws, services, claims.user_id, sub, state))

        try:
            await _read(ws, sub, state, restart)
        finally:
            pusher[0].cancel()


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


async def _read(
    ws: WebSocket, sub: _Subscription, state: dict[str, Any], restart: Callable[[], None]
) -> None:
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            raw = await ws.receive_text()
            try:
                msg = _parse(raw)
            except BadMessage as exc:
                await _error(ws, exc)
                continue
            match msg:
                case Ping():
                    await _reply(ws, "pong", {})
                case Subscribe():
                    _subscribe(sub, msg, state, restart)
                    await _reply(ws, "subscribed", {"event_types": sorted(sub.types),
                                                    "task_id": str(sub.task_id or "") or None})
                case Unsubscribe():
                    sub.types -= set(msg.event_types or ALL_TYPES)
                    await _reply(ws, "unsubscribed", {"event_types": sorted(sub.types)})
                case Auth():
                    await _error(ws, BadMessage("This socket is signed in already.",
                                                code="already_signed_in"))


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
                             "unsubscribe, ping or auth.", field="type") from None
        raise BadMessage(f"{field}: {first['msg']}.", field=field) from None


def _subscribe(
    sub: _Subscription, msg: Subscribe, state: dict[str, Any], restart: Callable[[], None]
) -> None:
    types = msg.event_types
    before = (sub.task_id, sub.also)
    sub.types = {t for t in types if t in ALL_TYPES} if types else set(ALL_TYPES)
    sub.task_id = msg.task_id
    sub.also = frozenset(t for t in msg.any_task_types or () if t in ALL_TYPES)
    sub.batch = msg.batch
    if msg.since is not None:
        state["since"] = msg.since
        restart()
    elif (sub.task_id, sub.also) != before:  # another stream: from now on
        state["since"] = None
        restart()


async def _push(
    ws: WebSocket, services: Services, user_id: uuid.UUID, sub: _Subscription,
    state: dict[str, Any],
) -> None:
    since = state["since"]
    replay = since is not None  # asked to resume: say when the past has been sent
    if since is None:
        since = state["since"] = await streams.current_seq(services)
    stream = streams.replay_then_live(
        services, user_id=user_id, task_id=sub.task_id, since=since, also=sub.also,
        announce=replay, kind=StreamKind.WEBSOCKET)
    async for items in streams.batched(stream, limit=BATCH if sub.batch else 1):
        out = []
        for item in items:
            if item.get("seq"):  # a live-only event (seq 0) is outside the order it resumes from
                state["since"] = item["seq"]
            if item["type"] == "caught_up" or sub.wants(item):
                out.append(item)
        if len(out) == 1:
            await ws.send_text(json.dumps(out[0]))
        elif out:
            await ws.send_text(json.dumps({"type": "batch", "items": out}))


async def _reply(ws: WebSocket, kind: str, data: dict[str, Any]) -> None:
    await ws.send_text(json.dumps({"type": kind, "data": data,
                                   "timestamp": utcnow().isoformat().replace("+00:00", "Z")}))


async def _error(ws: WebSocket, exc: BadMessage) -> None:
    await _reply(ws, "error", {"code": exc.code, "message": exc.message, "field": exc.field})


def _query_since(value: str | None) -> int | None:
    """`?since=` of the upgrade request: None (from now on) if absent."""
    if value is None or value == "":
        return None
    if not value.isdigit() or int(value) > MAX_INT64:
        raise BadMessage(f"since must be an event sequence number, 0 to {MAX_INT64}; "
                         "following from now on instead.", field="since")
    return int(value)
