"""The client WebSocket `/ws`: subscribe to event types (optionally one task), replay with `since`.

Client → server: `{"type": "subscribe", "event_types": [...], "task_id"?: ..., "since"?: N}`
(fields may also sit under `data`), `{"type": "unsubscribe", "event_types": [...]}`,
`{"type": "ping"}`. Server → client: `{type, data, timestamp, seq}` events, `pong`,
`subscribed`, `error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from shoal.api import streams
from shoal.api.deps import Services
from shoal.auth.tokens import decode_token
from shoal.errors import ShoalError
from shoal.events import EventType
from shoal.store.models import utcnow

router = APIRouter()
ALL_TYPES = frozenset(t.value for t in EventType)


class _Subscription:
    """What one client wants to see."""

    def __init__(self) -> None:
        self.types: set[str] = set(ALL_TYPES)
        self.task_id: uuid.UUID | None = None

    def wants(self, item: dict[str, Any]) -> bool:
        if item["type"] not in self.types:
            return False
        return self.task_id is None or item["data"].get("task_id") == str(self.task_id)


@router.websocket("/ws")
async def client_socket(ws: WebSocket) -> None:
    """Live events for a signed-in user."""
    services: Services = ws.app.state.services
    try:
        claims = decode_token(ws.query_params.get("token", ""), settings=services.settings,
                              expected_type="access")
    except ShoalError as exc:
        await ws.accept()  # accept first so the browser sees the 4401 code and the reason
        await ws.close(code=4401, reason=exc.message[:120])
        return
    await ws.accept()
    sub = _Subscription()
    state: dict[str, Any] = {"since": _since(ws.query_params.get("since"))}
    async with asyncio.TaskGroup() as tg:
        pusher = [tg.create_task(_push(ws, services, claims.user_id, sub, state))]

        def restart() -> None:
            pusher[0].cancel()
            pusher[0] = tg.create_task(_push(ws, services, claims.user_id, sub, state))

        try:
            await _read(ws, sub, state, restart)
        finally:
            pusher[0].cancel()


async def _read(
    ws: WebSocket, sub: _Subscription, state: dict[str, Any], restart: Callable[[], None]
) -> None:
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            try:
                msg = json.loads(await ws.receive_text())
                kind = msg.get("type")
                data = {**msg, **(msg.get("data") or {})}
            except (ValueError, AttributeError):
                await _reply(ws, "error", {"message": "Send JSON objects with a 'type'."})
                continue
            if kind == "ping":
                await _reply(ws, "pong", {})
            elif kind == "subscribe":
                _subscribe(sub, data, state, restart)
                await _reply(ws, "subscribed", {"event_types": sorted(sub.types),
                                                "task_id": str(sub.task_id or "") or None})
            elif kind == "unsubscribe":
                sub.types -= set(data.get("event_types") or ALL_TYPES)
                await _reply(ws, "unsubscribed", {"event_types": sorted(sub.types)})
            else:
                await _reply(ws, "error", {"message": f"Unknown message type {kind!r}."})


def _subscribe(
    sub: _Subscription, data: dict[str, Any], state: dict[str, Any], restart: Callable[[], None]
) -> None:
    types = data.get("event_types")
    sub.types = {t for t in types if t in ALL_TYPES} if types else set(ALL_TYPES)
    task_id = data.get("task_id")
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        sub.task_id = uuid.UUID(str(task_id)) if task_id else None
    if data.get("since") is not None:
        state["since"] = _since(data.get("since"))
        restart()


async def _push(
    ws: WebSocket, services: Services, user_id: uuid.UUID, sub: _Subscription,
    state: dict[str, Any],
) -> None:
    since = state["since"]
    if since is None:
        since = state["since"] = await streams.current_seq(services)
    async for item in streams.replay_then_live(services, user_id=user_id, task_id=None,
                                               since=since):
        state["since"] = item["seq"]
        if sub.wants(item):
            await ws.send_text(json.dumps(item))


async def _reply(ws: WebSocket, kind: str, data: dict[str, Any]) -> None:
    await ws.send_text(json.dumps({"type": kind, "data": data,
                                   "timestamp": utcnow().isoformat().replace("+00:00", "Z")}))


def _since(value: Any) -> int | None:
    try:
        return max(0, int(value)) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None
