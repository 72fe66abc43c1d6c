"""The Anthropic Messages API (`POST /v1/messages`, `…/count_tokens`) for the fake server.

JSON, or `text/event-stream` with the standard events (`message_start`, `content_block_*` for
text and `tool_use` with `input_json_delta`, `message_delta` with the stop reason and usage,
`message_stop`). Claude Code posts to `/v1/messages?beta=true`; the query is ignored.

Decoding follows what Claude Code sends: `system` as a string or a list of text blocks,
`role: "system"` entries inside `messages`, user text wrapped in `<system-reminder>` blocks
(stripped), and `tool_result` blocks, which become neutral tool messages — a user turn made
only of tool results is not user text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from shoal.demo.fake.exchange import DEMO_MODEL, answer, client_left_during, next_id, record
from shoal.demo.fake.wire import (
    Conversation,
    Message,
    Reply,
    ToolCall,
    ToolSpec,
    paced,
    pieces,
    schema_parameters,
    text_of,
    usage_counts,
)

API = "anthropic"
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 529: "overloaded_error"}
_STALL_LIMIT = 3600.0  # a non-streaming stall waits this long for the client to leave


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/messages", _messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", _count_tokens, methods=["POST"]),
    ]


# ---- decoding ---------------------------------------------------------------------------


def decode(body: dict[str, Any]) -> Conversation:
    """A Messages API request as a neutral conversation."""
    messages: list[Message] = []
    system = _text(body.get("system"))
    if system:
        messages.append(Message("system", system))
    for m in body["messages"]:
        if isinstance(m, dict):
            messages.extend(_decode_message(m))
    tools = tuple(ToolSpec(str(t.get("name", "")), schema_parameters(t.get("input_schema")))
                  for t in body.get("tools") or [] if isinstance(t, dict))
    return Conversation(API, str(body.get("model", "")), tuple(messages), tools,
                        bool(body.get("stream")))


def _decode_message(m: dict[str, Any]) -> list[Message]:
    role, content = m.get("role"), m.get("content")
    if role == "system":  # Claude Code's mid-conversation system entries
        return [Message("system", _text(content))]
    if role == "assistant":
        blocks = _blocks(content)
        calls = tuple(ToolCall(str(b.get("name", "")), _input(b.get("input")), str(b.get("id", "")))
                      for b in blocks if b.get("type") == "tool_use")
        text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        return [Message("assistant", text, calls)]
    if role != "user":
        return []
    blocks = _blocks(content)
    decoded = [Message("tool", _text(b.get("content")))
               for b in blocks if b.get("type") == "tool_result"]
    text = _strip_reminders("".join(str(b.get("text", "")) for b in blocks
                                    if b.get("type") == "text"))
    if text:
        decoded.append(Message("user", text))
    return decoded


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text(content: Any) -> str:
    return text_of(content) if isinstance(content, str) else text_of(
        [b for b in _blocks(content) if b.get("type", "text") == "text"])


def _strip_reminders(text: str) -> str:
    return _REMINDER.sub("", text).strip()


def _input(raw: Any) -> dict[str, Any]:
    return raw if isinstance(raw, dict) else {}


# ---- routes -----------------------------------------------------------------------------


async def _read_body(request: Request) -> dict[str, Any] | Response:
    try:
        body = await request.json()
    except ValueError:
        return error(400, "The request body is not JSON. Send a Messages API request.")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return error(400, "messages: Field required; it must be a list of messages.")
    return body


async def _count_tokens(request: Request) -> Response:

    body = await _read_body(request)
    if isinstance(body, Response):
        return body
    conversation = decode(body)
    record(request, "anthropic_count_tokens", body)
    return JSONResponse({"input_tokens": usage_counts(conversation, Reply())[0]})


async def _messages(request: Request) -> Response:

    body = await _read_body(request)
    if isinstance(body, Response):
        return body
    conversation = decode(body)
    reply = await answer(request, conversation, body)
    if reply is None:
        return Response(status_code=499)  # nobody is listening any more
    fault = reply.fault
    if fault is not None and fault.kind == "status":
        return error(fault.status, fault.message, retry_after=fault.retry_after)
    if fault is not None and not conversation.stream:
        if fault.kind == "malformed":
            return Response('{"id": "msg_broken", "content": [', media_type="application/json")
        await client_left_during(request, _STALL_LIMIT)
        return Response(status_code=499)
    number = next_id(request)
    model = str(body.get("model") or "")
    if conversation.stream:
        events = _events(reply, number, conversation, model)
        return StreamingResponse(paced(events, reply), media_type="text/event-stream")
    return JSONResponse(_message(reply, number, conversation, model))


def error(status: int, message: str, *, retry_after: float | None = None) -> Response:
    """An Anthropic-style error body.

    Without `retry_after`, `x-should-retry: false` stops the Anthropic SDKs (and Claude Code)
    from retrying a scripted failure; with it, `retry-after` tells the client when to return.
    """
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    headers = ({"retry-after": f"{retry_after:g}"} if retry_after is not None
               else {"x-should-retry": "false"})
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}},
                        status_code=status, headers=headers)


# ---- encoding ---------------------------------------------------------------------------


def _wire_calls(reply: Reply, number: int) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": c.id or f"toolu_demo_{number}_{i}", "name": c.name,
             "input": c.arguments} for i, c in enumerate(reply.tool_calls)]


def _envelope(number: int, model: str) -> dict[str, Any]:

    return {"id": f"msg_demo_{number}", "type": "message", "role": "assistant",
            "model": model or DEMO_MODEL, "content": [], "stop_reason": None,
            "stop_sequence": None}


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def _message(reply: Reply, number: int, conversation: Conversation,
             model: str) -> dict[str, Any]:
    prompt, answer = usage_counts(conversation, reply)
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content.extend(_wire_calls(reply, number))
    return {**_envelope(number, model), "content": content,
            "stop_reason": _stop_reason(reply),
            "usage": {"input_tokens": prompt, "output_tokens": answer}}


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def _events(reply: Reply, number: int, conversation: Conversation, model: str) -> Iterator[str]:
    prompt, answer = usage_counts(conversation, reply)
    yield _sse("message_start", {"message": {
        **_envelope(number, model),
        "usage": {"input_tokens": prompt, "output_tokens": 1}}})
    if reply.fault is not None and reply.fault.kind == "malformed":
        yield 'event: content_block_start\ndata: {"type": "content_block_start", "index": \n\n'
        return
    index = 0
    if reply.text:
        yield _sse("content_block_start", {"index": index,
                                           "content_block": {"type": "text", "text": ""}})
        for piece in pieces(reply.text):
            yield _sse("content_block_delta", {"index": index,
                                               "delta": {"type": "text_delta", "text": piece}})
        yield _sse("content_block_stop", {"index": index})
        index += 1
    for call in _wire_calls(reply, number):
        yield _sse("content_block_start", {"index": index, "content_block": {
            **call, "input": {}}})
        for piece in pieces(json.dumps(call["input"])):
            yield _sse("content_block_delta", {"index": index, "delta": {
                "type": "input_json_delta", "partial_json": piece}})
        yield _sse("content_block_stop", {"index": index})
        index += 1
    yield _sse("message_delta", {"delta": {"stop_reason": _stop_reason(reply),
                                           "stop_sequence": None},
                                 "usage": {"output_tokens": answer}})
    yield _sse("message_stop", {})
