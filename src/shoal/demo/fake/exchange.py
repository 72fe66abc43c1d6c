"""What every protocol module of the fake model server shares: the request log, ids, and
`answer()`, which records a conversation, asks the app's script (`app.state.decide`) for the
reply, applies scripted faults (counting `times` per conversation), fits the reply's tool calls
to the tools the client offered, and waits out a scripted delay."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request

from shoal.demo.fake.wire import Conversation, Reply, fit_calls

DEMO_MODEL = "shoal-demo"
LABEL = "[demo model]"
NOTICE = ("> Written by Shoal's built-in demo model, which answers from what its tools returned "
          "and its script, not a real model. To connect one (Claude Code, an API key, Ollama, "
          "any OpenAI-compatible server), see docs/guides/models.md, \"Connect real models\".")
"""The first lines of every result the demo model writes (a report, a summary)."""


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
    record(request, conversation.api, body, conversation)
    reply = request.app.state.decide(conversation)
    assert isinstance(reply, Reply)
    fault = reply.fault
    if fault is not None and fault.times is not None:
        key = fault.counted_by or _conversation_key(conversation)
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
